"""`nmt serve`: translation over HTTP on top of `decoding`.

`batcher` merges requests from concurrent clients into decode calls (no HTTP, no model); `app`
assembles the FastAPI app from `routes` (nmt's own, LibreTranslate's, the server's status), which
answer each request once `dependencies` has read it and checked its key and `requests` has checked
its fields (its decode settings by `decoding.settings`) and picked its language pair;
`translating` takes its texts through the `text_lane` (HTML, sentences, phrases) and the queue,
with the refusals both request shapes share worded by `refusals`; `service` holds what the routes
share. `server` binds the socket and runs uvicorn, with `connection_guard`
bounding slow and greedy clients, until SIGTERM.
"""
