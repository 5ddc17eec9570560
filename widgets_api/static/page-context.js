// Parkway playground: the chat controller and the view as the widgets reach them.
//
// The chat drives the widgets (widgets.js) and the view, and the widgets answer back
// to the chat and redraw through the view. Reaching those two through this object,
// filled in once by playground.js at boot, keeps the module imports acyclic: the
// widget modules never import chat.js or view.js, and chat.js never imports view.js.
//
// An ES module; no build step.

/** `chat`: chat.js's controller; `view`: view.js's renderer. Null until boot. */
export const page = { chat: null, view: null };
