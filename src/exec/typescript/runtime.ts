/**
 * TypeScript's runtime: a warm pool of Deno children that have loaded the runner and wait for
 * code, for runs of the default profile; a child spawned with its grants for any other run.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { type GrantedPermissions, isDefaultProfile } from "../../policy/permissions.ts";
import { sealChildDenoDir } from "../child/deno_dir.ts";
import { WarmPool } from "../child/warm_pool.ts";
import {
  checkPreparedRun,
  type LanguageRuntime,
  type Lease,
  type LeaseRequest,
  PREPARE_RUN_LIMITS,
  type RuntimeContext,
} from "../runtime.ts";
import { TsChild, type TsChildOptions } from "./child.ts";
import { NpmPackages } from "./npm_packages.ts";
import { wrapTypescript } from "./source.ts";

type BaseChildOptions = Omit<TsChildOptions, "net" | "read" | "write">;

/** TypeScript children: pooled for the default profile, spawned with the grants otherwise. */
export class TypeScriptRuntime implements LanguageRuntime {
  /** The language it runs. */
  readonly language = "typescript";
  #context: RuntimeContext;
  #base: BaseChildOptions;
  #pool: WarmPool<TsChild>;
  #packages: NpmPackages;

  private constructor(context: RuntimeContext, packages: NpmPackages) {
    this.#context = context;
    this.#packages = packages;
    const { locations, settings, log } = context;
    this.#base = {
      denoPath: locations.denoPath,
      denoDir: locations.tsDenoDir,
      runnerPath: locations.runnerPath,
      tempRoot: locations.tempRoot,
      memoryMb: settings.limits.memoryMb,
      packages: packages.enabled
        ? { importMapUrl: packages.importMapUrl(), list: packages.list }
        : undefined,
      log,
    };
    this.#pool = new WarmPool(settings.sandbox.warmPool, () => this.#spawn({ preload: true }), log);
  }

  /**
   * Readies the TypeScript children's Deno cache (sealed, with the npm packages of
   * `sandbox.npmPackages` fetched into it when missing) and, with `warm`, fills the pool.
   *
   * @param context The executor's settings, locations, log, shutdown and reaper.
   * @param options Whether to fill the warm pool now.
   * @returns The runtime.
   * @throws {Error} When a package of `sandbox.npmPackages` cannot be fetched.
   */
  static async create(
    context: RuntimeContext,
    options: { warm: boolean },
  ): Promise<TypeScriptRuntime> {
    const { locations, settings, log } = context;
    await sealChildDenoDir(locations.tsDenoDir, true);
    const packages = new NpmPackages(settings.sandbox.npmPackages);
    await packages.ensureCached({
      denoPath: locations.denoPath,
      denoDir: locations.tsDenoDir,
      log,
    });
    const runtime = new TypeScriptRuntime(context, packages);
    if (options.warm) runtime.#pool.fill();
    return runtime;
  }

  async #spawn(extra: Pick<TsChildOptions, "preload">): Promise<TsChild> {
    const child = await TsChild.spawn({ ...this.#base, ...extra });
    if (!(await child.ready)) {
      await child.dispose();
      throw new Error(
        `The sandbox runner did not start (deno at "${this.#base.denoPath}"); set sandbox.denoPath or DENO_PATH to a working Deno ${Deno.version.deno}`,
      );
    }
    return child;
  }

  /**
   * Leases a warm child for the default profile, or spawns one with the run's grants.
   *
   * @param request The code, the grants and a skill's arguments (a nested run).
   * @returns The lease.
   */
  async lease(request: LeaseRequest): Promise<Lease> {
    const { code, granted, args } = request;
    // Before a child is taken: a refused import costs the run nothing else.
    this.#packages.check(code, granted.read);
    const pooled = isDefaultProfile(granted) ? this.#pool.take() : undefined;
    const child = pooled ?? await TsChild.spawn({ ...this.#base, ...granted });
    const reaper = this.#context.reaper;
    reaper.track(child);
    // A skill's body (a nested run) gets its arguments, and the `skills` of its level.
    const wrapped = args ? wrapTypescript(code, { params: "args, skills" }) : wrapTypescript(code);
    return {
      run: (limits) => child.run(wrapped, { ...limits, args }),
      done: () =>
        reaper.retire(child, async () => {
          // Pooled children do not write to the emit cache (see TsChild.spawn).
          if (!pooled) await sealChildDenoDir(this.#base.denoDir, true);
          this.#pool.fill();
        }),
    };
  }

  /**
   * A skill's body for the caller's TypeScript child: wrapped as a module the runner imports
   * from a `data:` URL, with the line offset that points a stack trace at the skill's own line.
   *
   * @param code The skill's body.
   * @param granted The caller's grants: the files the body may import.
   * @returns `{lineOffset, base64}`.
   */
  inlineSkill(code: string, granted: GrantedPermissions): Record<string, unknown> {
    this.#packages.check(code, granted.read);
    const wrapped = wrapTypescript(code, { params: "args, skills" });
    return {
      lineOffset: wrapped.lineOffset,
      base64: Buffer.from(wrapped.source).toString("base64"),
    };
  }

  /**
   * Runs code in a child spawned for it, as the server does for a run with its own permissions:
   * such a child writes the runner's compiled JavaScript to the children's Deno cache (pooled
   * children do not), which later children then read.
   *
   * @returns Where the runner was compiled, and how long a run took.
   * @throws {Error} When no child starts or it cannot run code.
   */
  async prepare(): Promise<string> {
    const started = performance.now();
    const cannotStart = (why: string) =>
      new Error(
        `Cannot start a TypeScript sandbox (deno at "${this.#base.denoPath}"${why}): set sandbox.denoPath or DENO_PATH to a working Deno ${Deno.version.deno}`,
      );
    const child = await TsChild.spawn(this.#base).catch((error) => {
      throw cannotStart(`: ${(error as Error).message}`);
    });
    try {
      if (!(await child.ready)) throw cannotStart("");
      // Every package is loaded as a run would load it, from the cache and offline: a package
      // that a child cannot load fails here rather than in the first run that imports it.
      const imports = this.#packages.list.map((pkg) =>
        `await import(${JSON.stringify(pkg.name)});`
      );
      checkPreparedRun(
        "A TypeScript sandbox",
        await child.run(
          wrapTypescript([...imports, "return 6 * 7"].join("\n")),
          PREPARE_RUN_LIMITS,
        ),
      );
    } finally {
      await child.dispose();
      await sealChildDenoDir(this.#base.denoDir, true);
    }
    const packages = this.#packages.enabled
      ? `; npm packages ${this.#packages.summary()} load offline`
      : "";
    return `the runner is compiled into ${this.#base.denoDir}${packages}; a run took ${
      Math.round(performance.now() - started)
    } ms`;
  }

  /**
   * The warm pool.
   *
   * @returns The pool.
   */
  pool(): Promise<WarmPool<TsChild>> {
    return Promise.resolve(this.#pool);
  }

  /**
   * The warm pool's size now.
   *
   * @returns Children ready for a run, and how many the pool keeps.
   */
  warmChildren(): { ready: number; target: number } {
    return { ready: this.#pool.idle, target: this.#pool.target };
  }

  /** Kills the pooled children. */
  close(): Promise<void> {
    return this.#pool.close();
  }
}
