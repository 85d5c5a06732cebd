"""servelab: a small, readable LLM-serving stack for the workbook."""
