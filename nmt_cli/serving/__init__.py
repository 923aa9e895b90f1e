"""`nmt serve`: translation over HTTP on top of `decoding`.

`batcher` merges requests from concurrent clients into decode calls (no HTTP, no model); `app` is
the FastAPI app that checks each request (its decode settings by `decoding.settings`) and answers
it; `server` binds the socket and runs uvicorn until SIGTERM.
"""
