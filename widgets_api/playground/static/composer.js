// Parkway playground: the composer. It sends the user's message, keeps it in the box
// when it was not sent, offers the agent's suggested first message (GET /api/agent
// `suggestions`: a button in the empty chat that sends it, and the placeholder), and
// asks first when a new message would end requests still waiting for the user (the
// server cancels a step's pending calls when a new message arrives): an in-page confirm
// step, never window.confirm, which a browser may suppress and which blocks the page.
//
// An ES module imported by playground.js; no build step.

/** The composer of one chat. `doc`: the page's document; `chat`: the Chat (chat.js). */
export class Composer {
  constructor(doc, chat) {
    this.chat = chat;
    this.form = doc.getElementById("composer-form");
    this.box = doc.getElementById("composer");
    this.confirm = doc.getElementById("supersede");
    this.confirmText = doc.getElementById("supersede-text");
    this.sendAnyway = doc.getElementById("supersede-send");
    this.keep = doc.getElementById("supersede-keep");
    this.offer = doc.getElementById("suggest");
    this.suggestions = [...doc.querySelectorAll('[data-action="suggest"]')];
  }

  /** The agent's suggested first messages: the empty chat offers the first (a button
   *  that sends it) and the placeholder names it; without one, nothing is suggested. */
  suggest(suggestions) {
    const first = Array.isArray(suggestions) ? suggestions.find((s) => typeof s === "string" && s.trim()) : undefined;
    this.offer.hidden = !first;
    for (const button of this.suggestions) {
      button.textContent = first || "";
      button.dataset.text = first || "";
    }
    this.box.placeholder = first ? `Message the agent… (try “${first}”)` : "Message the agent…";
  }

  start() {
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    this.box.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      } else if (event.key === "Escape") {
        this.dismiss();
      }
    });
    this.sendAnyway.addEventListener("click", () => this.send());
    this.keep.addEventListener("click", () => {
      this.dismiss();
      this.box.focus();
    });
    for (const button of this.suggestions) {
      button.addEventListener("click", () => {
        this.box.value = button.dataset.text || button.textContent;
        this.submit();
      });
    }
  }

  /** Send, unless cards wait for the user: then ask first. */
  submit() {
    if (!this.box.value.trim() || this.chat.busy()) return;
    const waiting = this.chat.widgets.waiting();
    if (!waiting.length) {
      this.send();
      return;
    }
    const names = waiting.map((widget) => `“${widget.title(widget.ctx())}”`).join(", ");
    this.confirmText.textContent =
      waiting.length === 1
        ? `${names} is still waiting for you. Sending this message ends it, and the agent is told it was cancelled.`
        : `${waiting.length} requests are still waiting for you (${names}). Sending this message ends them, and the agent is told they were cancelled.`;
    this.sendAnyway.textContent = waiting.length === 1 ? "Send and end it" : "Send and end them";
    this.confirm.hidden = false;
    this.keep.focus();
  }

  dismiss() {
    this.confirm.hidden = true;
  }

  /** Send the box's text; put it back when it was not sent (the banner says why). */
  send() {
    this.dismiss();
    const text = this.box.value.trim();
    if (!text || this.chat.busy()) return;
    this.box.value = "";
    this.chat.send(text).then((sent) => {
      if (!sent && !this.box.value) this.box.value = text;
    });
  }
}
