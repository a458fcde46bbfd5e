/**
 * A Worker of `bench/py_boot.ts`: it boots Pyodide from the memory snapshot the way
 * `sandbox/py_worker.ts` does (the module compiled once by its parent, the snapshot read while
 * Pyodide's modules load) and times each stage of Pyodide's own loader on the way, through the
 * hooks that `loadPyodide` offers (`createPyodideModule`, Emscripten's `instantiateWasm` and
 * `onRuntimeInitialized`) and the two API calls that restore the snapshot.
 *
 * Message in: `{indexUrl, snapshotPath, module}`; out: `{marks}`, milliseconds since the message
 * for each stage's end, in the order reached; or `{error}`.
 *
 * @module
 */

type Settings = Record<string, unknown> & {
  instantiateWasm: (
    imports: unknown,
    done: (instance: unknown, module: unknown) => void,
  ) => unknown;
};

interface PyodideApi {
  restoreSnapshot(snapshot: Uint8Array): unknown;
  finalizeBootstrap(...args: unknown[]): unknown;
}

interface Loaded {
  pyimport(name: string): {
    attach(bridge: unknown, allowed: string): void;
    warm_up(): string;
  };
}

const scope = globalThis as unknown as {
  onmessage: ((event: MessageEvent) => void) | null;
  postMessage(message: unknown): void;
  close(): void;
};

async function boot(
  indexUrl: string,
  snapshotPath: string,
  module: WebAssembly.Module,
): Promise<Record<string, number>> {
  const started = performance.now();
  const marks: Record<string, number> = {};
  const mark = (name: string) => marks[name] = performance.now() - started;
  const snapshot = Deno.readFile(snapshotPath);
  const { loadPyodide } = await import(new URL("pyodide.mjs", indexUrl).href);
  mark("pyodide.mjs imported (with Deno's Node layer)");
  const asm = await import(new URL("pyodide.asm.mjs", indexUrl).href);
  mark("pyodide.asm.mjs imported");
  // As the sandbox's Worker does: Pyodide instantiates the parent's compiled module.
  const instantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = (async (source: unknown, imports?: WebAssembly.Imports) => {
    if (!(source instanceof ArrayBuffer || ArrayBuffer.isView(source))) {
      return await (instantiate as (s: unknown, i?: WebAssembly.Imports) => Promise<unknown>)(
        source,
        imports,
      );
    }
    return { module, instance: await instantiate(module, imports) };
  }) as typeof WebAssembly.instantiate;
  const createPyodideModule = async (settings: Settings) => {
    mark("configured: Node modules, lock file, Wasm file read started");
    const instantiateWasm = settings.instantiateWasm;
    settings.instantiateWasm = (imports, done) => {
      mark("Emscripten's module factory run");
      return instantiateWasm(imports, (instance, compiled) => {
        mark("instance made (the shared module)");
        done(instance, compiled);
        mark("dynamic linking: exports, GOT, table");
      });
    };
    settings.onRuntimeInitialized = () => mark("file system: stdlib zip, home, mounts");
    const made = await asm.default(settings) as { API: PyodideApi };
    const api = made.API;
    const restore = api.restoreSnapshot.bind(api);
    api.restoreSnapshot = (bytes) => {
      mark("runtime ready");
      const config = restore(bytes);
      mark("snapshot copied into the memory");
      return config;
    };
    const finalize = api.finalizeBootstrap.bind(api);
    api.finalizeBootstrap = (...args) => {
      const done = finalize(...args);
      mark("interpreter finalized (JS side of the snapshot)");
      return done;
    };
    return made;
  };
  try {
    const pyodide = await loadPyodide({
      indexURL: new URL(".", new URL("pyodide.mjs", indexUrl)).pathname,
      env: { HOME: "/home/pyodide" },
      args: [],
      _loadSnapshot: snapshot,
      createPyodideModule,
    }) as Loaded;
    mark("loadPyodide resolved (streams, sys.path)");
    const sandbox = pyodide.pyimport("_sandbox");
    sandbox.attach({ sleep() {}, request() {}, requestBlocking() {} }, "[]");
    mark("prelude attached");
    sandbox.warm_up();
    mark("warm-up 1 + 1");
  } finally {
    WebAssembly.instantiate = instantiate;
  }
  return marks;
}

scope.onmessage = (event: MessageEvent) => {
  const { indexUrl, snapshotPath, module } = event.data as {
    indexUrl: string;
    snapshotPath: string;
    module: WebAssembly.Module;
  };
  boot(indexUrl, snapshotPath, module).then(
    (marks) => scope.postMessage({ marks }),
    (error) => scope.postMessage({ error: String((error as Error)?.stack ?? error) }),
  );
};
