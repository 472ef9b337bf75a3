"""Parses `policy-injector audit export --format otel` output, one OTLP JSON LogsData per line,
with the OpenTelemetry protocol's generated classes (`opentelemetry-proto`, pinned in
hack/lib.sh) and protobuf's json_format, unknown fields refused. Usage: validate_otlp.py FILE..."""
import sys
from google.protobuf import json_format
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
n = records = bad = 0
for path in sys.argv[1:]:
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        n += 1
        try:
            msg = json_format.Parse(line, LogsData(), ignore_unknown_fields=False)
        except json_format.ParseError as e:
            bad += 1
            print(f"{path} line {i}: {e}")
            continue
        for rl in msg.resource_logs:
            for sl in rl.scope_logs:
                for r in sl.log_records:
                    records += 1
                    if r.time_unix_nano == 0 or r.severity_number == 0 or not r.HasField("body"):
                        bad += 1
                        print(f"{path} line {i}: a log record without time, severity or body")
print(f"{n} OTLP JSON LogsData lines parsed, {records} log records, {bad} errors")
sys.exit(1 if bad or n == 0 else 0)
