#!/usr/bin/env python3
"""A loopback stand-in for Grafana Pyroscope and an OpenTelemetry Collector:
it decodes every push with the real schemas and writes what it found, one
JSON line per request, to DIR/pushes.jsonl.

- POST /push.v1.PusherService/Push: Pyroscope's push.v1.PushRequest (read by
  hand after Pyroscope's api/push/v1/push.proto and api/types/v1/types.proto:
  series = 1, labels = 1 {name = 1, value = 2}, samples = 2 {raw_profile = 1,
  ID = 2}); each raw profile is saved as DIR/pyroscope-N-S.pb.gz for
  `go tool pprof`.
- POST /v1development/profiles: OTLP ExportProfilesServiceRequest, decoded by
  PyPI's opentelemetry-proto; stacks are resolved through the dictionary.

DIR/mode says how to answer: ok (200), 500 (500 with a Connect error body),
slow (wait 30 s, then 200), count (200 without decoding: benchmarks). The port is printed on stdout's first line.
"""

import gzip
import http.server
import json
import os
import sys
import threading
import time

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

OUT = sys.argv[1]
LOCK = threading.Lock()
COUNT = [0]


def varint(b, i):
    shift = value = 0
    while True:
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        if c < 0x80:
            return value, i
        shift += 7


def fields(b):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 2:
            n, i = varint(b, i)
            v = b[i:i + n]
            i += n
        elif wire == 1:
            v = b[i:i + 8]
            i += 8
        elif wire == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, v


def pyroscope(body, n):
    series = []
    for num, _, s in fields(body):
        if num != 1:
            raise ValueError(f"PushRequest field {num}")
        labels, files = {}, []
        for snum, _, v in fields(s):
            if snum == 1:
                pair = {f: x.decode() for f, _, x in fields(v)}
                labels[pair.get(1, "")] = pair.get(2, "")
            elif snum == 2:
                raw = [x for f, _, x in fields(v) if f == 1][0]
                gzip.decompress(raw)  # must be gzip
                path = os.path.join(OUT, f"pyroscope-{n}-{len(series)}-{len(files)}.pb.gz")
                with open(path, "wb") as f:
                    f.write(raw)
                files.append(path)
        series.append({"labels": labels, "files": files})
    return {"series": series}


def anyvalue(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def otlp(body, encoding):
    if encoding == "gzip":
        body = gzip.decompress(body)
    req = profiles_service_pb2.ExportProfilesServiceRequest()
    req.ParseFromString(body)
    d = req.dictionary
    s = d.string_table

    def attrs(indices):
        out = {}
        for i in indices:
            a = d.attribute_table[i]
            out[s[a.key_strindex]] = anyvalue(a.value)
        return out

    resources = []
    for rp in req.resource_profiles:
        res = {kv.key: anyvalue(kv.value) for kv in rp.resource.attributes}
        profiles = []
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                samples = []
                for smp in p.samples:
                    frames = []
                    for li in d.stack_table[smp.stack_index].location_indices:
                        loc = d.location_table[li]
                        for line in loc.lines:
                            frames.append(s[d.function_table[line.function_index].name_strindex])
                    frames.reverse()  # root first, as folded text
                    samples.append({
                        "frames": frames,
                        "values": list(smp.values),
                        "attrs": attrs(smp.attribute_indices),
                    })
                profiles.append({
                    "type": s[p.sample_type.type_strindex],
                    "unit": s[p.sample_type.unit_strindex],
                    "period_type": s[p.period_type.type_strindex],
                    "period": p.period,
                    "time_unix_nano": p.time_unix_nano,
                    "duration_nano": p.duration_nano,
                    "scope": sp.scope.name,
                    "samples": samples,
                })
        resources.append({"attributes": res, "profiles": profiles})
    return {"resources": resources}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            with open(os.path.join(OUT, "mode")) as f:
                mode = f.read().strip() or "ok"
        except FileNotFoundError:
            mode = "ok"
        with LOCK:
            COUNT[0] += 1
            n = COUNT[0]
        rec = {
            "n": n,
            "at": time.time(),
            "path": self.path,
            "mode": mode,
            "content_type": self.headers.get("Content-Type"),
            "content_encoding": self.headers.get("Content-Encoding"),
            "authorization": self.headers.get("Authorization"),
            "org": self.headers.get("X-Scope-OrgID"),
            "bytes": len(body),
        }
        if mode == "slow":
            time.sleep(30)
        status = 500 if mode == "500" else 200
        if mode == "count":
            rec["kind"] = "counted"
        elif status == 200:
            try:
                if self.path == "/push.v1.PusherService/Push":
                    rec["kind"] = "pyroscope"
                    rec.update(pyroscope(body, n))
                elif self.path == "/v1development/profiles":
                    rec["kind"] = "otlp"
                    rec.update(otlp(body, self.headers.get("Content-Encoding")))
                else:
                    status = 404
            except Exception as e:  # a push that does not decode is a test failure
                rec["error"] = repr(e)
                status = 400
        rec["status"] = status
        with LOCK, open(os.path.join(OUT, "pushes.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        if status == 500:
            out = b'{"code":"internal","message":"receiver told to fail"}'
            ctype = "application/json"
        elif self.path.startswith("/push.v1"):
            out, ctype = b"", "application/proto"
        else:
            out, ctype = b"", "application/x-protobuf"
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon gave up waiting (the slow mode's point)


def main():
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
