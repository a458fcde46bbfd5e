# Code Executor as a container: `serve --http` on 0.0.0.0:3333, bearer-token auth required.
#
#   podman build --format docker -t code-executor .    # docker build -t code-executor . elsewhere
#   docker run -d --init --read-only --tmpfs /tmp:rw,size=1g,mode=1777 \
#     -e CODE_EXECUTOR_HTTP_TOKEN=<16+ characters> -v ./mcp.json:/config/code-executor/mcp.json:ro \
#     -p 127.0.0.1:3333:3333 code-executor
#
# Everything the server would fetch or build on first use (npm and remote modules, the sandbox
# runners' compiled JavaScript, the sandbox's npm packages, Pyodide and its memory snapshot) is
# prepared at build time, so the server runs offline, from a read-only root filesystem, as a
# non-root user; only /tmp (the sandboxes' workspaces) and the audit volume are written. See
# docs/container.md.
FROM denoland/deno:2.9.6

# Build-time and run-time paths must be the same: the snapshot's path is part of its cache key.
ENV XDG_CACHE_HOME=/opt/code-executor/cache \
    XDG_CONFIG_HOME=/config \
    HOME=/tmp \
    TMPDIR=/tmp \
    AUDIT_LOG_PATH=/var/log/code-executor/audit.jsonl \
    DENO_NO_UPDATE_CHECK=1 \
    NO_COLOR=1

WORKDIR /app

# npm packages of upstream MCP servers to bake in, space-separated (e.g.
# "npm:@modelcontextprotocol/server-memory@2026.8.31"); the container fetches nothing at run
# time, so an mcp.json entry runs one with `deno run -A --no-config --cached-only <spec>`.
ARG UPSTREAM_PACKAGES=""
RUN for spec in $UPSTREAM_PACKAGES; do deno cache --no-config "$spec" || exit 1; done

# npm packages TypeScript code may import (sandbox.npmPackages), name@exact-version,
# space-separated (e.g. "csv-parse@7.0.3 fast-png@8.0.0"): `prepare` fetches them into the
# children's cache below, and the server, with the same variable, finds them there read-only.
ARG NPM_PACKAGES=""
ENV CODE_EXECUTOR_NPM_PACKAGES=${NPM_PACKAGES}

# Dependencies first, so that a code change does not fetch them again.
COPY deno.json deno.lock ./
RUN deno install --frozen

COPY main.ts LICENSE README.md ./
COPY src/ src/
COPY sandbox/ sandbox/
COPY lua/ lua/
# `prepare` loads the modules of every command, compiles the sandbox runners, fetches the npm
# packages and loads them in a child, builds the Pyodide snapshot and checks that a child boots
# from it; it fails the build when it cannot. The rest is
# made readable (not writable) by the runtime user, whatever the umask of the checkout; only what
# needs it is changed, since a chmod copies a file of an earlier layer (node_modules/, /deno-dir/)
# into this one.
RUN deno cache --frozen main.ts \
 && deno run -A --frozen main.ts prepare \
 && mkdir -p /var/log/code-executor /config/code-executor \
 && chown deno:deno /var/log/code-executor \
 && find /app /deno-dir /opt/code-executor /config \
      \( -type d ! -perm -a+rx -o -type f ! -perm -a+r \) -exec chmod a+rX {} +

# The audit log outlives the container; mount a volume here (a new anonymous one otherwise).
VOLUME /var/log/code-executor

USER deno
EXPOSE 3333
STOPSIGNAL SIGTERM
# /healthz needs no token; `deno eval` because the image has no curl.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["deno", "eval", "const r = await fetch('http://127.0.0.1:3333/healthz').catch(() => null); Deno.exit(r?.ok ? 0 : 1)"]
# --cached-only: nothing is fetched at run time. The V8 flag keeps a long-running server's memory
# near its baseline (docs/http.md). Our own ENTRYPOINT, so that the image behaves
# the same on the official base (tini + docker-entrypoint.sh) and on a stand-in: run with --init.
ENTRYPOINT ["deno", "run", "-A", "--cached-only", "--frozen", "--v8-flags=--max-semi-space-size=1", "/app/main.ts"]
# Auth is required on 0.0.0.0: the server refuses to start without CODE_EXECUTOR_HTTP_TOKEN (or
# OAuth settings in /config/code-executor/config.jsonc).
CMD ["serve", "--http", "--host", "0.0.0.0", "--port", "3333"]
