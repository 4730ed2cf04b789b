import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

/**
 * The web console, built into dist/console, which the package ships: `oncebox server` serves it at
 * /console/ with no build step on the user's side. Relative asset URLs (base './') keep it working
 * behind a proxy that serves the server under a path of its own.
 */
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: './',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  resolve: { alias: { react: 'preact/compat', 'react-dom': 'preact/compat' } },
  build: {
    outDir: fileURLToPath(new URL('../dist/console', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    // The console's source maps would ship in every install: left out.
    sourcemap: false,
  },
  logLevel: 'warn',
});
