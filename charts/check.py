"""Checks the Helm chart with Helm's own Go library (helm-sdkpy): the chart
lints clean, and its values.schema.json rejects bad values.

Usage: python3 charts/check.py charts/xo
Install: pip install --ignore-requires-python helm-sdkpy
"""
import asyncio
import pathlib
import shutil
import sys
import tempfile

try:
    import helm_sdkpy
except ImportError:
    sys.exit("helm-sdkpy is not installed: pip install --ignore-requires-python helm-sdkpy")


def lint(path):
    cfg = helm_sdkpy.Configuration()
    try:
        return asyncio.run(helm_sdkpy.Lint(cfg).run(str(path)))
    except helm_sdkpy.HelmError as e:
        return {"error": str(e)}


def messages(result):
    return str(result)


def clean(result):
    """No error, and no message above INFO (Helm: 1 info, 2 warning, 3 error)."""
    if "error" in result or result.get("Errors"):
        return False
    return all(m.get("Severity", 0) <= 1 for m in result.get("Messages") or [])


BAD = {
    "unknown top-level key": "image:\n  repository: xo\n  tag: '1'\norg:\n  prefix: xo\nnats:\n  bundled: true\nrunners: []\npersistence:\n  size: 1Gi\nreplicaz: 3\n",
    "negative replicas": "image:\n  repository: xo\n  tag: '1'\norg:\n  prefix: xo\nnats:\n  bundled: true\nrunners:\n  - role: coder\n    replicas: -1\npersistence:\n  size: 1Gi\n",
    "unknown driver": "image:\n  repository: xo\n  tag: '1'\norg:\n  prefix: xo\nnats:\n  bundled: true\nrunners:\n  - role: coder\n    replicas: 1\n    driver: gpt\npersistence:\n  size: 1Gi\n",
    "external NATS without a URL": "image:\n  repository: xo\n  tag: '1'\norg:\n  prefix: xo\nnats:\n  bundled: false\nrunners: []\npersistence:\n  size: 1Gi\n",
    "console port out of range": "image:\n  repository: xo\n  tag: '1'\norg:\n  prefix: xo\nnats:\n  bundled: true\nrunners: []\npersistence:\n  size: 1Gi\nconsole:\n  service:\n    port: 70000\n",
    "bad volume size": "image:\n  repository: xo\n  tag: '1'\norg:\n  prefix: xo\nnats:\n  bundled: true\nrunners: []\npersistence:\n  size: lots\n",
}


def main():
    chart = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "charts/xo")
    result = lint(chart)
    text = messages(result)
    failed = not clean(result)
    print(f"lint {chart}: {text}")
    if failed:
        sys.exit(f"the chart does not lint clean: {text}")
    bad_ok = []
    for name, values in BAD.items():
        with tempfile.TemporaryDirectory() as d:
            copy = pathlib.Path(d) / "xo"
            shutil.copytree(chart, copy)
            (copy / "values.yaml").write_text(values)
            res = lint(copy)
            # The schema check is Helm's error on values.yaml.
            if not any(m.get("Severity") == 3 and m.get("Path") == "values.yaml" for m in res.get("Messages") or []):
                bad_ok.append(name)
            print(f"rejected ({name}): {messages(res)[:400]}")
    if bad_ok:
        sys.exit(f"the schema accepted bad values: {', '.join(bad_ok)}")
    print("chart ok: lints clean, schema rejects every bad value")


if __name__ == "__main__":
    main()
