#!/usr/bin/env bash
# Checks docker/Dockerfile, docker/docker-compose.yml and the test's override
# docker/docker-compose.test.yml without a container engine: they parse, and they say what
# Quarry's images and cluster need (see the checks below); scripts/docker-test.sh builds and runs
# them for real. Runs hadolint too when it is installed, and `docker compose config` (or
# docker-compose 1.x's) when compose is there (neither is needed). Also checks that the checks
# fail on broken files (a built-in self-test).
#
# Needs python3 with PyYAML (Debian: python3-yaml). Exit status 0 when everything holds.
set -euo pipefail

cd "$(dirname "$0")/.."

PY=""
for p in /usr/bin/python3 python3 .venv/bin/python; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import yaml' >/dev/null 2>&1; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "check-docker: no python3 with PyYAML (Debian: apt-get install python3-yaml)" >&2
    exit 1
fi

"$PY" - docker/Dockerfile docker/docker-compose.yml docker/docker-compose.test.yml scripts/docker-base.sh <<'PYEOF'
import json
import os
import re
import sys

import yaml

DOCKERFILE, COMPOSE, TEST_COMPOSE, BASE_SCRIPT = sys.argv[1:5]

INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER",
}
BUILD_PACKAGES = ["build-essential", "ca-certificates", "curl"]
# rdma-core's runtime libraries and providers (its `rdma-core` package is the host's udev and
# systemd side, which a container does not use); curl for the health check.
RUNTIME_PACKAGES = ["ibverbs-providers", "libibverbs1", "ca-certificates", "curl"]
NODES = ["node1", "node2", "node3", "node4"]
DRIVES = "http://node{1...4}:9000/data{1...4}"


def parse_dockerfile(text):
    """[(line number, INSTRUCTION, arguments)], continuation lines joined, comments dropped."""
    out, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, args = buf.strip().partition(" ")
        out.append((start, word.upper(), args.strip()))
        buf = ""
    if buf:
        raise ValueError(f"line {start}: the file ends inside a continued instruction")
    return out


def json_form(n, what, args):
    """The exec form of CMD/ENTRYPOINT/SHELL/HEALTHCHECK CMD, which must be a JSON string array."""
    if not args.startswith("["):
        return None
    try:
        v = json.loads(args)
    except ValueError as e:
        raise ValueError(f"line {n}: {what} is not a valid JSON array: {e}")
    if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
        raise ValueError(f"line {n}: {what} must be a non-empty JSON array of strings")
    return v


def check_dockerfile(text, context_root):
    errors = []
    try:
        ins = parse_dockerfile(text)
    except ValueError as e:
        return [str(e)]
    args = {}
    stages = []  # [{"name", "image", "ins": [...]}]
    for n, word, rest in ins:
        if word not in INSTRUCTIONS:
            errors.append(f"line {n}: unknown instruction {word}")
            continue
        if word == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip().strip('"')
            continue
        if word == "FROM":
            parts = [p for p in rest.split() if not p.startswith("--")]
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            if name and any(s["name"] == name for s in stages):
                errors.append(f"line {n}: stage name {name} used twice")
            parent = next((s for s in stages if s["name"] == image), None)
            stages.append({"name": name, "image": image, "from": parts[0], "parent": parent, "ins": []})
            if parent is not None or image == "scratch":
                continue
            if "@" not in image:
                repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
                if not tag:
                    errors.append(f"line {n}: FROM {image} has no tag (pin one)")
                elif tag == "latest":
                    errors.append(f"line {n}: FROM {image} uses the `latest` tag")
            if "bookworm" not in image:
                errors.append(f"line {n}: FROM {image} is not a Debian bookworm image")
            continue
        if not stages:
            errors.append(f"line {n}: {word} before the first FROM")
            continue
        stages[-1]["ins"].append((n, word, rest))
        if word in ("CMD", "ENTRYPOINT", "SHELL"):
            try:
                json_form(n, word, rest)
            except ValueError as e:
                errors.append(str(e))
        if word == "HEALTHCHECK" and rest.upper() != "NONE":
            m = re.search(r"\bCMD\s+(.*)$", rest)
            if not m:
                errors.append(f"line {n}: HEALTHCHECK without CMD")
            else:
                try:
                    json_form(n, "HEALTHCHECK CMD", m.group(1))
                except ValueError as e:
                    errors.append(str(e))
        if word in ("COPY", "ADD"):
            flags = [p for p in rest.split() if p.startswith("--")]
            paths = [p for p in rest.split() if not p.startswith("--")]
            frm = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if frm:
                if not any(s["name"] == frm[0] for s in stages[:-1]):
                    errors.append(f"line {n}: COPY --from={frm[0]} names no earlier stage")
            elif stages[-1]["name"] != "prebuilt":  # prebuilt/ is the caller's context
                for src in paths[:-1]:
                    if src != "." and not os.path.exists(os.path.join(context_root, src)):
                        errors.append(f"line {n}: COPY source {src} does not exist in the build context")
        if word == "RUN" and "apt-get install" in rest:
            if "--no-install-recommends" not in rest or " -y" not in rest:
                errors.append(f"line {n}: apt-get install without -y --no-install-recommends")
            if "rm -rf /var/lib/apt/lists" not in rest:
                errors.append(f"line {n}: apt-get install without removing /var/lib/apt/lists")
    if len(stages) < 2:
        errors.append("not a multi-stage build (want a build stage and a runtime stage)")
        return errors
    build, final = stages[0], stages[-1]
    named = {s["name"]: s for s in stages if s["name"]}

    def runs(stage):
        """The RUN instructions of a stage and of the stages it starts from."""
        own = " ".join(r for _, w, r in stage["ins"] if w == "RUN")
        return own if stage["parent"] is None else runs(stage["parent"]) + " " + own

    # Binaries: compiled by the build stage by default, or (BINARIES=prebuilt) taken from the
    # context's prebuilt/; the runtime's base: the runtime-base stage or a ready image.
    if args.get("BINARIES") != "build" or build["name"] != "build":
        errors.append("ARG BINARIES must default to build, the first stage (compiling from source)")
    pre = named.get("prebuilt")
    if pre is None or pre["image"] != "scratch" or not any(
        w == "COPY" and "prebuilt/quarry " in r + " " and "prebuilt/quarry-bench" in r and r.split()[-1] == "/out/"
        for _, w, r in pre["ins"]
    ):
        errors.append("no `prebuilt` stage (FROM scratch, COPY prebuilt/quarry prebuilt/quarry-bench /out/)")
    bins = named.get("binaries")
    if bins is None or bins["from"] != "${BINARIES}":
        errors.append("no `binaries` stage FROM ${BINARIES}")
    if args.get("RUNTIME_BASE") != "runtime-base" or "runtime-base" not in named:
        errors.append("ARG RUNTIME_BASE must default to the runtime-base stage")
    if final["from"] != "${RUNTIME_BASE}":
        errors.append(f"the runtime stage starts FROM {final['from']}, want ${{RUNTIME_BASE}}")
    if not any(w == "COPY" and "--from=binaries" in r for _, w, r in final["ins"]):
        errors.append("the runtime stage does not COPY --from=binaries")
    # scripts/docker-base.sh makes the test's base with the same packages.
    base_script = open(os.path.join(context_root, BASE_SCRIPT)).read() if os.path.exists(os.path.join(context_root, BASE_SCRIPT)) else ""
    m = re.search(r"^PACKAGES=\(([^)]*)\)", base_script, re.M)
    rb = named.get("runtime-base")
    if rb is not None:
        installed = set()
        for r in (r for _, w, r in rb["ins"] if w == "RUN" and "apt-get install" in r):
            after = r.split("apt-get install", 1)[1].split("&&")[0]
            installed |= {p for p in after.split() if not p.startswith("-")}
        if not m or set(m.group(1).split()) != installed:
            errors.append(
                f"{BASE_SCRIPT} PACKAGES ({m.group(1).split() if m else None}) differ from what the "
                f"runtime-base stage installs ({sorted(installed)})"
            )
    if re.search(r"(?im)^#\s*syntax\s*=", text):
        errors.append("a `# syntax=` directive makes BuildKit pull its frontend from a registry (the built-in one suffices)")

    for p in BUILD_PACKAGES:
        if not re.search(rf"(^|\s){re.escape(p)}(\s|$)", runs(build)):
            errors.append(f"the build stage does not install {p}")
    cargo = runs(build)
    if not re.search(r"cargo build --release\b", cargo) or "-p quarry " not in cargo + " " \
            or "-p quarry-bench" not in cargo:
        errors.append("the build stage does not run `cargo build --release -p quarry -p quarry-bench`")
    for p in RUNTIME_PACKAGES:
        if not re.search(rf"(^|\s){re.escape(p)}(\s|$)", runs(final)):
            errors.append(f"the runtime stage does not install {p}")
    words = {}
    for n, w, r in final["ins"]:
        words.setdefault(w, []).append(r)
    users = words.get("USER", [])
    if not users or users[-1].split(":")[0] in ("root", "0"):
        errors.append("the runtime stage does not switch to a non-root USER")
    if not any("9000" in e.split() for e in words.get("EXPOSE", [])):
        errors.append("the runtime stage does not EXPOSE 9000")
    hc = words.get("HEALTHCHECK", [])
    if not hc:
        errors.append("the runtime stage has no HEALTHCHECK")
    else:
        probe = hc[-1]
        script = os.path.join(context_root, "docker", "healthcheck.sh")
        if "/health/live" not in probe and not (
            "healthcheck" in probe and os.path.exists(script) and "/health/live" in open(script).read()
        ):
            errors.append("the HEALTHCHECK does not probe /health/live")
    ep = words.get("ENTRYPOINT", [])
    if not ep:
        errors.append("the runtime stage has no ENTRYPOINT")
    else:
        try:
            v = json_form(0, "ENTRYPOINT", ep[-1]) or ep[-1].split()
            if not v[0].endswith("quarry"):
                errors.append(f"the ENTRYPOINT runs {v[0]}, not quarry")
        except ValueError as e:
            errors.append(str(e))
    return errors


def env_of(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    return env


def check_compose(text, compose_dir):
    errors = []
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"not valid YAML: {e}"]
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        return ["no `services` mapping"]
    if "name" in doc:
        errors.append("a top-level `name`: Debian bookworm's docker-compose 1.29 refuses the file (use -p)")
    services = doc["services"]
    if sorted(services) != NODES:
        errors.append(f"services are {sorted(services)}, want {NODES}")
    declared = doc.get("volumes") or {}
    commands, used = [], {}
    for name in NODES:
        s = services.get(name)
        if not isinstance(s, dict):
            continue
        cmd = s.get("command")
        cmd = cmd.split() if isinstance(cmd, str) else cmd
        if not isinstance(cmd, list):
            errors.append(f"{name}: no command")
            cmd = []
        commands.append(cmd)
        if cmd[:1] != ["server"] or DRIVES not in cmd:
            errors.append(f"{name}: command {cmd} is not `server ... {DRIVES}`")
        if "--set-size" not in cmd or cmd[cmd.index("--set-size") + 1:][:1] != ["4"]:
            errors.append(f"{name}: command {cmd} lacks --set-size 4")
        env = env_of(s)
        for var in ("QUARRY_ROOT_USER", "QUARRY_ROOT_PASSWORD"):
            v = env.get(var)
            if not isinstance(v, str) or not re.fullmatch(r"\$\{" + var + r":-[^}]+\}", v):
                errors.append(f"{name}: {var} is {v!r}, want ${{{var}:-default}} (from the environment, with a default)")
        addr = env.get("QUARRY_ADDRESS")
        if "--address" in cmd:
            addr = cmd[cmd.index("--address") + 1]
        if addr != f"{name}:9000":
            errors.append(f"{name}: address {addr!r}, want {name}:9000")
        memlock = (s.get("ulimits") or {}).get("memlock")
        if not (memlock == -1 or (isinstance(memlock, dict) and memlock.get("soft") == -1 and memlock.get("hard") == -1)):
            errors.append(f"{name}: ulimits.memlock is {memlock!r}, want -1 (unlimited)")
        hc = s.get("healthcheck")
        test = hc.get("test") if isinstance(hc, dict) else None
        if not test or hc.get("disable") or test == ["NONE"]:
            errors.append(f"{name}: no healthcheck test")
        elif isinstance(test, list) and test[0] not in ("CMD", "CMD-SHELL"):
            errors.append(f"{name}: healthcheck test must start with CMD or CMD-SHELL")
        vols = s.get("volumes") or []
        if len(vols) != 4:
            errors.append(f"{name}: {len(vols)} volumes, want 4")
        targets = set()
        for v in vols:
            src, _, target = (v.partition(":") if isinstance(v, str) else (v.get("source", ""), "", v.get("target", "")))
            target = target.split(":")[0]
            targets.add(target)
            if src in used:
                errors.append(f"{name}: volume {src} is also used by {used[src]}")
            used[src] = name
            if not src.startswith(("/", ".")) and src not in declared:
                errors.append(f"{name}: named volume {src} is not declared under `volumes`")
        if targets != {f"/data{i}" for i in range(1, 5)}:
            errors.append(f"{name}: volumes mount {sorted(targets)}, want /data1../data4")
        build = s.get("build")
        if isinstance(build, dict):
            df = os.path.join(compose_dir, build.get("context", "."), build.get("dockerfile", "Dockerfile"))
            if not os.path.exists(df):
                errors.append(f"{name}: build dockerfile {df} does not exist")
        image = s.get("image", "")
        if image.endswith(":latest"):
            errors.append(f"{name}: image {image} uses the `latest` tag")
    if any(c != commands[0] for c in commands):
        errors.append("the nodes do not all run the same command")
    ports = (services.get("node1") or {}).get("ports") or []
    if not any(str(p).split(":")[-1].split("/")[0] == "9000" for p in ports):
        errors.append("node1 does not publish port 9000")
    return errors


def check_test_override(text):
    """docker-compose.test.yml: every node on the host's network at 127.0.0.1:PORTn, no bridge."""
    errors = []
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"not valid YAML: {e}"]
    services = (doc or {}).get("services") or {}
    if sorted(services) != NODES:
        errors.append(f"services are {sorted(services)}, want {NODES}")
    if "networks" in (doc or {}):
        errors.append("declares networks: the test uses the host's network only")
    commands = []
    for i, name in enumerate(NODES, 1):
        s = services.get(name) or {}
        if s.get("network_mode") != "host":
            errors.append(f"{name}: network_mode is {s.get('network_mode')!r}, want host (never a bridge)")
        if s.get("ports") or s.get("networks"):
            errors.append(f"{name}: ports/networks make no sense with host networking")
        port = f"${{QUARRY_TEST_PORT{i}:?}}"
        if env_of(s).get("QUARRY_ADDRESS") != f"127.0.0.1:{port}":
            errors.append(f"{name}: QUARRY_ADDRESS is {env_of(s).get('QUARRY_ADDRESS')!r}, want 127.0.0.1:{port}")
        cmd = s.get("command") or []
        commands.append(cmd)
        drives = [c for c in cmd if "://" in c]
        want = [f"http://127.0.0.1:${{QUARRY_TEST_PORT{k}:?}}/data{{1...4}}/n{k}" for k in range(1, 5)]
        if drives != want:
            errors.append(f"{name}: drives {drives}, want {want}")
        if cmd[:1] != ["server"] or "--set-size" not in cmd:
            errors.append(f"{name}: command {cmd} is not `server --set-size 4 ...`")
    if any(c != commands[0] for c in commands):
        errors.append("the nodes do not all run the same command")
    return errors


def run(dockerfile_text, compose_text, test_text):
    root = os.getcwd()
    return (
        check_dockerfile(dockerfile_text, root),
        check_compose(compose_text, os.path.dirname(COMPOSE)),
        check_test_override(test_text),
    )


dockerfile_text, compose_text, test_text = open(DOCKERFILE).read(), open(COMPOSE).read(), open(TEST_COMPOSE).read()
d_err, c_err, t_err = run(dockerfile_text, compose_text, test_text)
for what, errs in ((DOCKERFILE, d_err), (COMPOSE, c_err), (TEST_COMPOSE, t_err)):
    for e in errs:
        print(f"check-docker: {what}: {e}", file=sys.stderr)
    if not errs:
        print(f"check-docker: {what}: ok")

# Self-test: each of these breakages must be caught.
D, C, T = dockerfile_text, compose_text, test_text
broken = {
    "Dockerfile `latest` tag": (re.sub(r"ARG DEBIAN_IMAGE=\S+", "ARG DEBIAN_IMAGE=debian:latest", D), C, T),
    "Dockerfile bad JSON ENTRYPOINT": (D.replace('ENTRYPOINT ["', 'ENTRYPOINT ["x", '), C, T),
    "Dockerfile runs as root": (re.sub(r"(?m)^USER .*$", "USER root", D), C, T),
    "Dockerfile unknown instruction": (D + "\nCOPPY a b\n", C, T),
    "Dockerfile syntax directive": ("# syntax=docker/dockerfile:1\n" + D, C, T),
    "Dockerfile runtime without libibverbs1": (D.replace("        libibverbs1 ibverbs-providers", "        ibverbs-providers"), C, T),
    "Dockerfile BINARIES default": (D.replace("ARG BINARIES=build", "ARG BINARIES=prebuilt"), C, T),
    "Dockerfile runtime not on RUNTIME_BASE": (D.replace("FROM ${RUNTIME_BASE} AS runtime", "FROM ${DEBIAN_IMAGE} AS runtime"), C, T),
    "compose memlock": (D, C.replace("soft: -1", "soft: 65536"), T),
    "compose YAML": (D, C + "\n  bad: [\n", T),
    "compose node missing": (D, C.replace("  node4:\n", "  node5:\n"), T),
    "compose hard-coded password": (D, re.sub(r"QUARRY_ROOT_PASSWORD: .*", "QUARRY_ROOT_PASSWORD: secret", C), T),
    "compose top-level name": (D, "name: quarry\n" + C, T),
    "test override on a bridge": (D, C, T.replace("network_mode: host", "network_mode: bridge")),
    "test override address": (D, C, T.replace("QUARRY_ADDRESS: 127.0.0.1:${QUARRY_TEST_PORT4:?}", "QUARRY_ADDRESS: node4:9000")),
}
for what, (d, c, t) in broken.items():
    if (d, c, t) == (D, C, T):
        sys.exit(f"check-docker: self-test: the breakage {what!r} changed nothing (update the self-test)")
missed = [what for what, files in broken.items() if not any(run(*files))]
if missed:
    print(f"check-docker: self-test: these breakages went unnoticed: {missed}", file=sys.stderr)
sys.exit(1 if d_err or c_err or t_err or missed else 0)
PYEOF

if command -v hadolint >/dev/null 2>&1; then
    hadolint docker/Dockerfile
    echo "check-docker: hadolint: ok"
fi
COMPOSE=()
if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
fi
if [ "${#COMPOSE[@]}" -gt 0 ]; then
    export QUARRY_ROOT_USER=x QUARRY_ROOT_PASSWORD=y
    "${COMPOSE[@]}" -f docker/docker-compose.yml config -q
    QUARRY_TEST_PORT1=1 QUARRY_TEST_PORT2=2 QUARRY_TEST_PORT3=3 QUARRY_TEST_PORT4=4 QUARRY_METRICS_TOKEN=t \
        "${COMPOSE[@]}" -f docker/docker-compose.yml -f docker/docker-compose.test.yml config -q
    echo "check-docker: ${COMPOSE[*]} config: ok (with and without the test override)"
fi
echo "check-docker: all checks passed"
