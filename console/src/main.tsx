import { render } from 'preact';
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
            <Route path="/assets/:name">{(params) => <AssetPage name={decodeURIComponent(params.name)} />}</Route>
            <Route path="/streams">{() => <StreamsPage />}</Route>
            <Route path="/streams/:producer/:runId">{(params) => <RunPage producer={decodeURIComponent(params.producer)} runId={decodeURIComponent(params.runId)} />}</Route>
            <Route path="/consumers">{() => <ConsumersPage />}</Route>
            <Route path="/rejections">{() => <RejectionsPage />}</Route>
            <Route path="/events/:cursor">{(params) => <EventPageView cursor={Number(params.cursor)} />}</Route>
            <Route>
              <h1>Not found</h1>
              <p>No such page of the console.</p>
            </Route>
          </Switch>
        </Layout>
      </Router>
    </LiveProvider>
  );
}

render(
  <SessionProvider>
    <App />
  </SessionProvider>,
  document.getElementById('app')!,
);
