// Server-sent events with a visible connection state. EventSource reconnects
// by itself and sends the last event's id as Last-Event-ID, from which the
// job stream resumes exactly; the server's ": keep-alive" comments fire no
// event. `onState` hears "live" or "polling" (the page then relies on its
// slow poll until the stream is back).

export function subscribe(url, handlers, onState = () => {}) {
  let source = null;
  let closed = false;
  let retryTimer = null;

  function open() {
    if (closed) return;
    source = new EventSource(url(), { withCredentials: true });
    source.addEventListener("open", () => onState("live"));
    source.addEventListener("error", () => {
      onState("polling");
      // A closed stream (e.g. HTTP error) is not retried by the browser.
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        retryTimer = setTimeout(open, 3000);
      }
    });
    for (const [name, fn] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => {
        let data = null;
        try {
          data = JSON.parse(event.data);
        } catch {
          return;
        }
        fn(data, event);
      });
    }
  }

  open();
  return {
    /** Reopen now (e.g. with a new URL). */
    restart() {
      if (source) source.close();
      clearTimeout(retryTimer);
      open();
    },
    close() {
      closed = true;
      clearTimeout(retryTimer);
      if (source) source.close();
      onState("off");
    },
  };
}

export function showState(el, state) {
  if (!el) return;
  el.dataset.state = state;
  el.textContent =
    state === "live" ? "Live" : state === "polling" ? "Reconnecting… (polling)" : "Not live";
}
