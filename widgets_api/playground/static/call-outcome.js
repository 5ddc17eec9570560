// Parkway playground: a parked call's outcome, the one source of truth for what its card
// and its tool chip say.
//
// The server's stored outcome (the call view of GET /api/chats/{id} or the call's
// statusUrl) wins; until the page has it, the outcome is read from the tool part the
// stream left, the way the server would have stored it. The chip (the badge on the tool
// call's summary line) is drawn from the card's state, so the two cannot disagree.
//
// An ES module with no state; imported by chat.js, widget.js and widgets.js. No build step.

import { canonical } from "./playground-base.js";
import { isResolved } from "./ui-stream.js";

/** Outcomes a person chose (here or elsewhere), as opposed to the server ending a call. */
export const PERSON_OUTCOMES = new Set(["output", "approved", "denied", "declined"]);

/** The call's outcome: the server's stored one, else the one its tool part implies; null
 *  while it is pending (or only answered in this tab, not yet sent). */
export function outcomeOf(part, callView, desc, answeredHere) {
  if (callView && callView.status === "settled" && callView.outcome) return callView.outcome;
  if (answeredHere || !part || !isResolved(part)) return null;
  const approval = desc.callKind === "approval" || part.approval !== undefined;
  switch (part.state) {
    case "output-available": {
      if (approval) return { outcome: "approved" };
      const out = part.output;
      const keys = out && typeof out === "object" && !Array.isArray(out) ? Object.keys(out) : [];
      const statusOnly = keys.length && keys.every((k) => k === "status" || k === "reason");
      if (statusOnly && ["declined", "cancelled", "timeout"].includes(out.status)) {
        return out.reason ? { outcome: out.status, reason: out.reason } : { outcome: out.status };
      }
      return { outcome: "output", output: out };
    }
    case "output-error":
      return { outcome: "error", message: part.errorText };
    case "output-denied":
      return part.approval && part.approval.reason
        ? { outcome: "denied", reason: part.approval.reason }
        : { outcome: "denied" };
    case "approval-responded":
      return part.approval && part.approval.approved ? { outcome: "approved" } : { outcome: "denied" };
    default:
      return null;
  }
}

/** What the chip says for a card state: [label, tone]. Tones: wait, run, ok, bad,
 *  neutral (playground.css `.badge-*`). */
const CHIPS = {
  pending: ["waiting for you", "wait"],
  connecting: ["waiting for you", "wait"],
  awaiting: ["waiting for an approver", "wait"],
  submitting: ["sending", "run"],
  queued: ["answered", "wait"],
  answered: ["answered", "ok"],
  approved: ["approved", "ok"],
  connected: ["connected", "ok"],
  denied: ["denied", "bad"],
  failed: ["failed", "bad"],
  ended: ["ended", "neutral"],
  declined: ["declined", "neutral"],
  unsupported: ["not supported", "bad"],
};

export function chipFor(state) {
  return CHIPS[state] || [state, "neutral"];
}

/** Whether the answer this tab gave is the outcome the server stored. */
export function sameAnswer(answer, outcome) {
  if (!answer || !outcome) return true;
  if (answer.intent && outcome.outcome !== answer.intent) return false;
  if (outcome.outcome !== "output" || !answer.patch || answer.patch.output === undefined) return true;
  try {
    return canonical(answer.patch.output) === canonical(outcome.output);
  } catch {
    return false;
  }
}
