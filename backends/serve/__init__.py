"""`whistle-stop serve ENGINE`: any engine behind an OpenAI-compatible completions server.

app.py (routes), protocol.py (requests and their bodies), jobs.py (one request's life between
the HTTP side and an engine worker), scheduler.py (the bounded queue), pool.py (the engine
workers), metrics.py (Prometheus text with vLLM's names), request_log.py (one line per request),
service.py (all of it together), server.py (uvicorn, graceful shutdown), cold_start.py (process
start to first completed response).
"""
