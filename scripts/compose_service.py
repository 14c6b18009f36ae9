#!/usr/bin/env python3
"""Translates one service of a docker-compose file into the `podman run`
arguments that run it as compose would, for tests of app-store
definitions (scripts/test-umbrel.sh) on a machine with podman and no
compose:

    compose_service.py FILE SERVICE image
    compose_service.py FILE SERVICE run --name NAME --network NET \\
        [--publish-host 127.0.0.1] [--host-port CONTAINER=HOST]...

Variables (${VAR} and $VAR) are taken from the environment, as compose
takes them; an unset one is an error, where compose would substitute an
empty string with a warning. `run` prints the arguments after `podman
run`, one per line (none contains a newline: checked). A key this
translator does not know is an error, never silently dropped, so the test
runs what the file says. `networks: default: ipv4_address` becomes
`--network NET --ip ADDRESS`: NET stands for the network the platform
adds as `default`. Published ports bind to --publish-host, and
--host-port moves a published port on the host (a test must not take a
fixed port of a shared machine).
"""

import argparse
import os
import re
import sys

import yaml

KNOWN_KEYS = {
    "image", "user", "restart", "stop_grace_period", "environment", "volumes",
    "ports", "networks", "depends_on", "init", "command", "entrypoint",
}
VARIABLE = re.compile(r"\$\$|\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def fail(message):
    print(f"compose_service: {message}", file=sys.stderr)
    sys.exit(1)


def interpolate(node):
    """Substitutes variables in every string value, as compose does after
    parsing (comments are not values)."""
    if isinstance(node, dict):
        return {key: interpolate(value) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value) for value in node]
    if not isinstance(node, str):
        return node

    def value(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(2)
        if name not in os.environ:
            fail(f"${name} is not set")
        return os.environ[name]
    return VARIABLE.sub(value, node)


def seconds(duration):
    """compose's durations: 90s, 5m, 1m30s."""
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(duration))
    if not parts or not any(parts.groups()):
        fail(f"stop_grace_period {duration!r} is not like 5m or 90s")
    return int(parts.group(1) or 0) * 60 + int(parts.group(2) or 0)


def command_words(value):
    return value if isinstance(value, list) else ["sh", "-c", value]


def run_args(service, args):
    unknown = set(service) - KNOWN_KEYS
    if unknown:
        fail(f"unknown keys {sorted(unknown)}")
    moved = dict(item.split("=", 1) for item in args.host_port)
    out = ["--name", args.name, "--detach"]
    if "user" in service:
        out += ["--user", str(service["user"])]
    if "restart" in service:
        out += ["--restart", service["restart"]]
    if "stop_grace_period" in service:
        out += ["--stop-timeout", str(seconds(service["stop_grace_period"]))]
    if service.get("init"):
        out.append("--init")
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    for key, value in environment.items():
        out += ["--env", f"{key}={value}"]
    for volume in service.get("volumes", []):
        out += ["--volume", volume]
    for port in service.get("ports", []):
        host, _, container = str(port).rpartition(":")
        host = moved.get(container, host or container)
        out += ["--publish", f"{args.publish_host}:{host}:{container}"]
    networks = service.get("networks", {})
    if set(networks) - {"default"}:
        fail(f"networks other than default: {sorted(networks)}")
    out += ["--network", args.network]
    address = (networks.get("default") or {}).get("ipv4_address")
    if address:
        out += ["--ip", address]
    if "entrypoint" in service:
        words = command_words(service["entrypoint"])
        out += ["--entrypoint", words[0]]
        out.append(service["image"])
        out += words[1:]
    else:
        out.append(service["image"])
    if "command" in service:
        out += command_words(service["command"])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("service")
    parser.add_argument("what", choices=["image", "run"])
    parser.add_argument("--name")
    parser.add_argument("--network")
    parser.add_argument("--publish-host", default="127.0.0.1")
    parser.add_argument("--host-port", action="append", default=[])
    args = parser.parse_args()
    with open(args.file, encoding="utf-8") as f:
        compose = yaml.safe_load(f)
    service = compose.get("services", {}).get(args.service)
    if service is None:
        fail(f"no service {args.service} in {args.file}")
    service = interpolate(service)
    if args.what == "image":
        print(service["image"])
        return
    if not args.name or not args.network:
        fail("run needs --name and --network")
    words = [str(word) for word in run_args(service, args)]
    if any("\n" in word for word in words):
        fail("an argument contains a newline")
    print("\n".join(words))


if __name__ == "__main__":
    main()
