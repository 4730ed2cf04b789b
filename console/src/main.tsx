import { render, type JSX } from 'preact';
import { Route, Router, Switch } from 'wouter-preact';
import { Layout } from './components/layout.js';
import { fragmentHref, useFragmentLocation, useFragmentSearch } from './hash-location.js';
import { LiveProvider } from './live.js';
import { AssetPage } from './pages/asset.js';
import { EventPageView } from './pages/event.js';
import { AssetsPage, ConsumersPage, RejectionsPage, StreamsPage } from './pages/lists.js';
import { OverviewPage } from './pages/overview.js';
import { RunPage } from './pages/run.js';
import { TokenGate } from './pages/token-gate.js';
import { SessionProvider, useSession } from './session.js';
import './styles.css';

/** A route's segment as it was encoded; null for one no link of the console makes (a malformed escape). */
function segment(text: string | undefined): string | null {
  if (text === undefined) return null;
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

function NotFound() {
  return (
    <>
      <h1>Not found</h1>
      <p>No such page of the console.</p>
    </>
  );
}

/** Routes live in the URL's fragment: the server serves one page, under any path a proxy puts it. */
function App() {
  const { token } = useSession();
  if (token === null) return <TokenGate />;
  return (
    <LiveProvider>
      <Router hook={useFragmentLocation} searchHook={useFragmentSearch} hrefs={fragmentHref}>
        <Layout>
          <Switch>
            <Route path="/">{() => <OverviewPage />}</Route>
            <Route path="/assets">{() => <AssetsPage />}</Route>
            <Route path="/assets/:name">{(params) => withSegments([params.name], ([name]) => <AssetPage name={name!} />)}</Route>
            <Route path="/streams">{() => <StreamsPage />}</Route>
            <Route path="/streams/:producer/:runId">{(params) => withSegments([params.producer, params.runId], ([producer, runId]) => <RunPage producer={producer!} runId={runId!} />)}</Route>
            <Route path="/consumers">{() => <ConsumersPage />}</Route>
            <Route path="/rejections">{() => <RejectionsPage />}</Route>
            <Route path="/events/:cursor">{(params) => <EventPageView cursor={Number(params.cursor)} />}</Route>
            <Route>
              <NotFound />
            </Route>
          </Switch>
        </Layout>
      </Router>
    </LiveProvider>
  );
}

/** The view of decoded route segments, or Not found when one cannot be decoded. */
function withSegments(encoded: (string | undefined)[], view: (segments: string[]) => JSX.Element) {
  const segments = encoded.map(segment);
  return segments.every((one): one is string => one !== null) ? view(segments) : <NotFound />;
}

render(
  <SessionProvider>
    <App />
  </SessionProvider>,
  document.getElementById('app')!,
);
