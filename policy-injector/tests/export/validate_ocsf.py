"""Validates `policy-injector audit export --format ocsf` output, one event per line, against
OCSF's published schema for the event's class and profiles (metadata.profiles), as JSON Schema
2020-12. The schema comes from the `ocsf-json-schema` package (pinned in hack/lib.sh), which
ships schema.ocsf.io's exports of each OCSF release (Apache-2.0) and turns a class into a
JSON Schema; nothing is fetched. Usage: validate_ocsf.py VERSION FILE..."""
import json, sys
from jsonschema import Draft202012Validator
from ocsf_json_schema import get_ocsf_schema, OcsfJsonSchemaEmbedded
version = sys.argv[1]
ocsf = OcsfJsonSchemaEmbedded(get_ocsf_schema(version=version))
validators, classes = {}, {}
n = bad = 0
for path in sys.argv[2:]:
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        e = json.loads(line)
        n += 1
        profiles = sorted(e["metadata"].get("profiles", []))
        key = (e["class_uid"], tuple(profiles))
        if key not in validators:
            schema = ocsf.get_class_schema(ocsf.lookup_class_name_from_uid(e["class_uid"]), profiles=profiles)
            Draft202012Validator.check_schema(schema)
            validators[key] = Draft202012Validator(schema)
        classes[e["class_uid"]] = classes.get(e["class_uid"], 0) + 1
        if e["metadata"]["version"] != version:
            bad += 1
            print(f"{path} line {i}: metadata.version {e['metadata']['version']}")
        if e["type_uid"] != e["class_uid"] * 100 + e["activity_id"]:
            bad += 1
            print(f"{path} line {i}: type_uid {e['type_uid']}")
        for err in validators[key].iter_errors(e):
            bad += 1
            if bad < 30:
                print(f"{path} line {i} (class {e['class_uid']}): {err.message[:300]} at {list(err.absolute_path)}")
print(f"{n} OCSF {version} events checked (by class {dict(sorted(classes.items()))}), {bad} errors")
sys.exit(1 if bad or n == 0 else 0)
