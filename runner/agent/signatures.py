"""A Python function read as a tool: its parameters as a JSON Schema, validated and typed.

:class:`ToolSignature` turns a function's typed signature into a pydantic model of its
arguments (``extra="forbid"``: a misspelt argument is an error the model can correct,
not silently dropped). The model's JSON Schema is the tool's ``input_schema``; each
parameter's description comes from the docstring (:mod:`.docstrings`) unless its
``Annotated[..., Field(description=...)]`` gives one. A call's JSON input is validated
by the same model, so arguments arrive as their declared types (a pydantic-model
parameter as that model, a ``datetime`` as a datetime), and the return value is dumped
to JSON through a pydantic ``TypeAdapter`` of the return annotation.

An optional first parameter typed :class:`~parkway.runner.agent.tools.ToolContext` (or an
unannotated one named ``ctx``) receives the call's context and is left out of the schema.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo

from parkway.runner.agent.docstrings import read_docstring
from parkway.runner.agent.tools import ToolContext
from parkway.runner.validation import describe_first_error

__all__ = ["ToolSignature", "wants_context"]

# protected_namespaces=(): a parameter may be called ``model_name``.
_FORBID = ConfigDict(extra="forbid", protected_namespaces=())


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except NameError as exc:
        raise TypeError(
            f"{_label(func)}: an annotation names something not defined yet ({exc}); define "
            "the types a tool uses before the tool"
        ) from None


def _label(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def wants_context(param: inspect.Parameter, hint: Any) -> bool:
    """Whether ``param`` is a context parameter: typed ``ToolContext``, or named ``ctx``
    with no annotation."""
    if hint is ToolContext:
        return True
    return param.name == "ctx" and param.annotation is inspect.Parameter.empty


def _has_description(hint: Any) -> bool:
    if typing.get_origin(hint) is not typing.Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in hint.__metadata__)


@dataclass(frozen=True)
class ToolSignature:
    """A function's parameters and result as a tool sees them. Build with :meth:`of`."""

    func: Callable[..., Any]
    description: str
    arguments: type[BaseModel]
    input_schema: Mapping[str, Any]
    takes_context: bool
    # the parameters passed by position (positional-only ones), in order
    positional: tuple[str, ...]
    returns: Any
    output: TypeAdapter[Any] = field(repr=False)

    @classmethod
    def of(cls, func: Callable[..., Any], *, allow_context: bool = True) -> ToolSignature:
        """Read ``func``. Raises :class:`TypeError` naming the function and the fix for
        what cannot be a tool's parameter (``*args``, ``**kwargs``, a context parameter
        that is not the first, or one on a client tool)."""
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{_label(func)}: its signature cannot be read ({exc})") from None
        hints = _hints(func)
        docs = read_docstring(func)
        fields: dict[str, Any] = {}
        positional: list[str] = []
        takes_context = False
        for index, param in enumerate(signature.parameters.values()):
            hint = hints.get(param.name, Any)
            if wants_context(param, hint):
                if index != 0 or not allow_context:
                    where = "the first parameter" if allow_context else "not on a client tool"
                    raise TypeError(
                        f"{_label(func)}: the context parameter {param.name!r} is allowed "
                        f"only as {where}"
                    )
                takes_context = True
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(
                    f"{_label(func)}: *{param.name} cannot be described to a model; give "
                    "the tool named parameters"
                )
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(param.name)
            default = ... if param.default is inspect.Parameter.empty else param.default
            described = docs.parameters.get(param.name)
            if described and not _has_description(hint):
                fields[param.name] = (hint, FieldInfo.from_field(default, description=described))
            else:
                fields[param.name] = (hint, default)
        name = getattr(func, "__name__", "tool")
        try:
            arguments = create_model(name, __config__=_FORBID, **fields)
            input_schema = arguments.model_json_schema()
        except PydanticUserError as exc:  # a type pydantic cannot validate or describe
            raise TypeError(f"{_label(func)}: its parameters have no JSON Schema ({exc})") from None
        returns = hints.get("return", Any)
        try:
            output: TypeAdapter[Any] = TypeAdapter(returns)
        except PydanticUserError:
            # A type pydantic cannot describe here (typing.TypedDict before Python 3.12):
            # the result is dumped as what it is at run time (a TypedDict is a dict), and
            # a client tool, whose answer needs the schema, says so in output_schema().
            output = TypeAdapter(Any)
        return cls(
            func=func,
            description=docs.description,
            arguments=arguments,
            input_schema=input_schema,
            takes_context=takes_context,
            positional=tuple(positional),
            returns=returns,
            output=output,
        )

    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the return annotation (a client tool's answer), or None
        when the function declares none (or ``-> None``)."""
        if self.returns is Any or self.returns is None or self.returns is type(None):
            return None
        try:
            return TypeAdapter(self.returns).json_schema()
        except PydanticUserError as exc:
            raise TypeError(
                f"{_label(self.func)}: its return annotation has no JSON Schema ({exc})"
            ) from None

    def problem(self, tool_input: Any) -> str | None:
        """Why ``tool_input`` is not valid arguments (``"<where>: <what>"``, dotted,
        ``(root)`` for the input as a whole), or None."""
        try:
            self.arguments.model_validate(tool_input)
        except ValidationError as exc:
            return describe_first_error(exc, root="(root)")
        return None

    def validate(self, tool_input: Any) -> dict[str, Any]:
        """The typed arguments of ``tool_input`` by name (raises ``ValidationError``)."""
        validated = self.arguments.model_validate(tool_input)
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    def bind(
        self, arguments: Mapping[str, Any], ctx: ToolContext | None
    ) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments to call the function with."""
        args: list[Any] = [ctx] if self.takes_context else []
        args.extend(arguments[name] for name in self.positional)
        kwargs = {k: v for k, v in arguments.items() if k not in self.positional}
        return args, kwargs

    def dump(self, output: Any) -> Any:
        """``output`` as plain JSON, serialised as its return annotation says (a model,
        dataclass or TypedDict becomes an object)."""
        return self.output.dump_python(output, mode="json")
