// Live updates: the audit stream as server-sent events (the session cookie
// goes with the EventSource). It reconnects by itself after a network blip;
// when the server closes it for good (an answer that is not a stream) the page
// checks the session and opens a new one, from the last entry it saw.

export function connectLive({ after, onEntry, onState, onReopen, stillSignedIn }) {
  let source = null;
  let last = after;
  let delay = 1000;
  let timer = null;
  let stopped = false;
  let opened = false;

  function open() {
    // Always from a seq (0: the log's start), never "from now": whatever was
    // written between the page's load and this connection arrives too.
    const url = `/v1/audit/stream?after=${encodeURIComponent(String(last))}`;
    source = new EventSource(url);
    source.addEventListener("open", () => {
      delay = 1000;
      onState("live");
      if (opened) onReopen();
      opened = true;
    });
    source.addEventListener("audit", (event) => {
      let entry;
      try {
        entry = JSON.parse(event.data);
      } catch {
        return;
      }
      if (entry && Number.isInteger(entry.seq)) last = Math.max(last, entry.seq);
      onEntry(entry);
    });
    source.addEventListener("error", () => {
      if (stopped) return;
      if (source.readyState === EventSource.CLOSED) {
        onState("offline");
        timer = setTimeout(retry, delay);
        delay = Math.min(delay * 2, 30_000);
      } else {
        onState("reconnecting");
      }
    });
  }

  async function retry() {
    timer = null;
    if (stopped) return;
    let signedIn;
    try {
      signedIn = await stillSignedIn();
    } catch {
      signedIn = null; // the server is not answering: try again later
    }
    if (stopped) return;
    if (signedIn === true) open();
    else if (signedIn === null) {
      timer = setTimeout(retry, delay);
      delay = Math.min(delay * 2, 30_000);
    }
  }

  open();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      if (source) source.close();
      onState("off");
    },
  };
}
