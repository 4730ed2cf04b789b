/** Runs `run` with `variables` set in this process's environment, and removes them after, however it ends. */
export async function withEnvironment<T>(variables: Record<string, string>, run: () => Promise<T>): Promise<T> {
  Object.assign(process.env, variables);
  try {
    return await run();
  } finally {
    for (const name of Object.keys(variables)) delete process.env[name];
  }
}
