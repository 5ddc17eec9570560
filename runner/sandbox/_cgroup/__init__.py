"""A run's own cgroup, where the host lets Parkway make one.

In a cgroup the kernel bounds what rlimits cannot: the memory of all the run's
processes together, and their number, whatever they fork. The launcher joins the run's
cgroup before it execs bwrap (``_spawn``), so every page and process of the run is
counted there; running out of memory ends the whole run (reported as ``killed``, "out
of memory"); the cgroup is removed when the run is over, and a server that starts
removes the ones a crashed server left.

Which cgroup (the ``sandbox_cgroup`` setting):

- ``auto``: first cgroup v2 (``_v2``): the server's own cgroup, when it lets this user
  make children with the memory and pids controllers, which the kernel allows only at
  the root of the hierarchy; else cgroup v1 (``_v1``): the server's own cgroups in the
  v1 memory and pids hierarchies, when both are writable (a hybrid host); else none,
  and the rlimit bound (:meth:`Limits.split`);
- ``off``: never;
- a path: a cgroup v2 folder the operator delegated (see docs/operations.md); when it
  is not usable the sandbox is unavailable with the reason, never silently without it.
"""

from parkway.runner.sandbox._cgroup._choice import find
from parkway.runner.sandbox._cgroup._run import CgroupEnd, Cgroups, RunCgroup

__all__ = ["CgroupEnd", "Cgroups", "RunCgroup", "find"]
