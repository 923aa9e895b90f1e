"""`nmt serve`: translation over HTTP on top of `decoding`.

`batcher` merges requests from concurrent clients into decode calls (no HTTP, no model); `app` is
the FastAPI app that answers each request once `requests` has checked it (its decode settings by
`decoding.settings`) and picked its language pair; `server` binds the socket and runs uvicorn
until SIGTERM.
"""
