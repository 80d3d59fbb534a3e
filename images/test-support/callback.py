#!/usr/bin/env python3
"""Stand-in for bootpool's callback endpoint, used by images/test-demo.sh.

Listens on ADDR:PORT, answers every POST with 200 and appends one line per request to
LOGFILE: "<path> <body>". Usage: callback.py ADDR PORT LOGFILE
"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, 65536)).decode("utf-8", "replace")
        ctype = self.headers.get("Content-Type", "")
        with open(sys.argv[3], "a", encoding="utf-8") as log:
            log.write(f"{self.path} {ctype} {body}\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, fmt, *args):
        pass


HTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
