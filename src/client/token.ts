/**
 * The environment variable a job, a consumer and every client command read their token from when none
 * is given. The server's own admin token has a variable of its own (ONCEBOX_ADMIN_TOKEN), so that a
 * job's token in a shared environment never becomes a server's admin token.
 */
export const TOKEN_VARIABLE = 'ONCEBOX_TOKEN';

/** The token in ONCEBOX_TOKEN, or undefined when it is unset or blank. */
export function tokenFromEnvironment(): string | undefined {
  const token = process.env[TOKEN_VARIABLE]?.trim();
  return token ? token : undefined;
}
