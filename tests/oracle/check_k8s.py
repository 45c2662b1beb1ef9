#!/usr/bin/env python3
"""Schema and invariant check of the Kubernetes examples (examples/k8s/*.yaml), offline.

Usage: python3 tests/oracle/check_k8s.py [--kubernetes-version 1.33] [FILE.yaml ...]
       (default: every examples/k8s/*.yaml of the repo)

Needs kubernetes-validate (tests/oracle/requirements.txt), which ships the Kubernetes JSON schemas:
no cluster and no network. Checks:
  * every document of every file validates against the schema of its kind for the stated
    Kubernetes version, strictly (an unknown or misspelled field is an error);
  * the build Job: `completionMode: Indexed`, `completions` == the `--parts N` of its
    `chatshards build` command, `parallelism` between 1 and N, no `--part I/N` (the index comes from
    JOB_COMPLETION_INDEX);
  * the merge Job runs `chatshards merge` on the same pipeline with the same `--parts N`;
  * both Jobs mount the same PersistentVolumeClaim (defined in the files, ReadWriteMany) at the
    same path, and the pipeline lies under that path;
  * every Job: restartPolicy Never or OnFailure, backoffLimit set.
Then it checks itself: a copy with a misspelled field must fail the schema check, and copies of
the (valid) examples that break each invariant must fail the invariant check: this check can fail.
Prints one line per document and a summary; exits non-zero naming the first problem.
"""
import argparse
import copy
import sys
from pathlib import Path

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
# The oldest Kubernetes release the examples are meant for (Indexed Jobs are GA since 1.24).
DEFAULT_VERSION = "1.33"


class CheckError(Exception):
    pass


def check(ok, message):
    if not ok:
        raise CheckError(message)


def validate(doc, version):
    """Strict schema validation; returns the schema version used, raises CheckError."""
    try:
        return kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path) or "(top)"
        raise CheckError(f"schema {exc.version}: {path}: {exc.message}") from None
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise CheckError(exc.message) from None


def name(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def container(job):
    containers = job["spec"]["template"]["spec"]["containers"]
    check(len(containers) == 1, f"{name(job)}: expected one container, found {len(containers)}")
    return containers[0]


def command(job):
    c = container(job)
    return [str(a) for a in c.get("command", []) + c.get("args", [])]


def chatshards_args(job):
    """(subcommand, pipeline, parts) of the Job's chatshards command."""
    cmd = command(job)
    check(cmd and Path(cmd[0]).name == "chatshards", f"{name(job)}: the command is not chatshards: {cmd}")
    rest = cmd[1:]
    check(rest and rest[0] in ("build", "merge"), f"{name(job)}: neither build nor merge: {cmd}")
    check("--part" not in rest, f"{name(job)}: uses --part I/N; an Indexed Job gives the index: --parts N")
    check(rest.count("--parts") == 1, f"{name(job)}: needs exactly one --parts N: {cmd}")
    i = rest.index("--parts")
    check(i + 1 < len(rest) and rest[i + 1].isdigit(), f"{name(job)}: --parts without a number: {cmd}")
    positional = [a for j, a in enumerate(rest[1:], 1) if not a.startswith("-") and rest[j - 1] not in ("--parts", "--threads", "--parts-dir")]
    check(len(positional) == 1, f"{name(job)}: expected one pipeline argument, found {positional}")
    return rest[0], positional[0], int(rest[i + 1])


def claim_mounts(job):
    """{claimName: mountPath} of the Job's container."""
    spec = job["spec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
    return {claims[m["name"]]: m["mountPath"] for m in container(job).get("volumeMounts", []) if m["name"] in claims}


def invariants(docs):
    """Checks the invariants over all documents; returns a one-line description."""
    jobs = [d for d in docs if d.get("kind") == "Job"]
    pvcs = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "PersistentVolumeClaim"}
    for job in jobs:
        spec = job["spec"]
        check(spec["template"]["spec"].get("restartPolicy") in ("Never", "OnFailure"),
              f"{name(job)}: restartPolicy must be Never or OnFailure")
        check(isinstance(spec.get("backoffLimit"), int) and spec["backoffLimit"] >= 0, f"{name(job)}: backoffLimit not set")
    builds = [j for j in jobs if chatshards_args(j)[0] == "build"]
    merges = [j for j in jobs if chatshards_args(j)[0] == "merge"]
    check(len(builds) == 1 and len(merges) == 1, f"expected one build Job and one merge Job, found {len(builds)} and {len(merges)}")
    build, merge = builds[0], merges[0]
    _, pipeline, parts = chatshards_args(build)
    spec = build["spec"]
    check(spec.get("completionMode") == "Indexed", f"{name(build)}: completionMode must be Indexed")
    check(spec.get("completions") == parts, f"{name(build)}: completions {spec.get('completions')} != --parts {parts}")
    check(1 <= spec.get("parallelism", 1) <= parts, f"{name(build)}: parallelism {spec.get('parallelism')} not in 1..{parts}")
    _, merge_pipeline, merge_parts = chatshards_args(merge)
    check(merge_parts == parts, f"{name(merge)}: --parts {merge_parts} != the build's {parts}")
    check(merge_pipeline == pipeline, f"{name(merge)}: pipeline {merge_pipeline} != the build's {pipeline}")
    check(merge["spec"].get("completionMode", "NonIndexed") == "NonIndexed" and merge["spec"].get("completions", 1) == 1,
          f"{name(merge)}: the merge is one pod")
    mounts_build, mounts_merge = claim_mounts(build), claim_mounts(merge)
    shared = sorted(set(mounts_build) & set(mounts_merge))
    check(shared, f"the Jobs share no PersistentVolumeClaim: {mounts_build} vs {mounts_merge}")
    claim = next((c for c in shared if pipeline.startswith(mounts_build[c].rstrip("/") + "/")), None)
    check(claim is not None, f"the pipeline {pipeline} is on no volume the two Jobs share")
    check(mounts_build[claim] == mounts_merge[claim], f"claim {claim} mounted at {mounts_build[claim]} and {mounts_merge[claim]}")
    check(claim in pvcs, f"PersistentVolumeClaim {claim} is not defined in the files")
    check("ReadWriteMany" in pvcs[claim]["spec"].get("accessModes", []), f"PersistentVolumeClaim {claim}: needs ReadWriteMany")
    return f"{parts} parts (Indexed, parallelism {spec.get('parallelism', 1)}) + merge, claim {claim} at {mounts_build[claim]}"


def self_test(docs, version):
    """The check must reject broken copies of the examples."""
    build = next(d for d in docs if d.get("kind") == "Job" and chatshards_args(d)[0] == "build")
    i = docs.index(build)
    broken = {
        "misspelled spec.completionMode": lambda j: j["spec"].__setitem__("completionsMode", j["spec"].pop("completionMode")),
        "misspelled restartPolicy": lambda j: j["spec"]["template"]["spec"].__setitem__(
            "restartPolcy", j["spec"]["template"]["spec"].pop("restartPolicy")),
        "completions as a string": lambda j: j["spec"].__setitem__("completions", str(j["spec"]["completions"])),
    }
    for what, spoil in broken.items():
        doc = copy.deepcopy(build)
        spoil(doc)
        try:
            validate(doc, version)
        except CheckError as exc:
            print(f"self-test: schema rejects a copy with {what}: {exc}")
        else:
            raise CheckError(f"self-test: the schema check accepted a copy with {what}")
    wrong = {
        "completions != --parts": lambda j: j["spec"].__setitem__("completions", j["spec"]["completions"] + 1),
        "not Indexed": lambda j: j["spec"].__setitem__("completionMode", "NonIndexed"),
        "no backoffLimit": lambda j: j["spec"].pop("backoffLimit"),
        "restartPolicy Always": lambda j: j["spec"]["template"]["spec"].__setitem__("restartPolicy", "Always"),
        "another claim": lambda j: j["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"].__setitem__("claimName", "other"),
    }
    for what, spoil in wrong.items():
        spoilt = copy.deepcopy(docs)
        spoil(spoilt[i])
        try:
            invariants(spoilt)
        except CheckError as exc:
            print(f"self-test: invariants reject a copy with {what}: {exc}")
        else:
            raise CheckError(f"self-test: the invariant check accepted a copy with {what}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubernetes-version", default=DEFAULT_VERSION)
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    files = args.files or sorted((REPO / "examples" / "k8s").glob("*.yaml"))
    try:
        check(files, "no examples/k8s/*.yaml")
        docs = []
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if doc is None:
                    continue
                used = validate(doc, args.kubernetes_version)
                print(f"ok {f.name}: {name(doc)} (Kubernetes {used} schema, strict)")
                docs.append(doc)
        summary = invariants(docs)
        self_test(docs, args.kubernetes_version)
    except (CheckError, KeyError, TypeError, OSError, yaml.YAMLError) as exc:
        sys.exit(f"check_k8s: FAIL: {exc}")
    print(f"check_k8s: {len(docs)} documents in {len(files)} files valid; {summary}")


if __name__ == "__main__":
    main()
