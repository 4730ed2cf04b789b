import { useState } from 'preact/hooks';
import { useSession } from '../session.js';

/** The first thing a new tab shows: where the read token goes, and which token that is. */
export function TokenGate() {
  const { signIn, refused } = useSession();
  const [token, setToken] = useState('');
  return (
    <main id="main" class="gate">
      <h1>oncebox console</h1>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (token.trim() !== '') signIn(token.trim());
        }}
      >
        <label for="token">Read token</label>
        <input id="token" name="token" type="password" autoComplete="off" value={token} onInput={(event) => setToken((event.target as HTMLInputElement).value)} required />
        <button type="submit">Open the console</button>
        {refused ? (
          <p class="error" role="alert">
            The server refused that token: {refused}
          </p>
        ) : null}
      </form>
      <p>
        The console needs a token that reads events and streams. An admin makes one with{' '}
        <code>oncebox token create --db SERVER.db --scope read --reads events,streams --note console</code>. It is kept in this tab only (session
        storage), sent in a header with each request, and never put in a URL.
      </p>
    </main>
  );
}
