import { EmissionValidationError } from '../protocol/errors.js';
import { closest } from '../protocol/emission.js';
import { isLifecycleAsset } from '../protocol/lifecycle.js';
import { echo, MAX_ECHO } from '../protocol/text.js';
import type { TokenScopeAnswer } from '../protocol/wire.js';

/**
 * @internal An asset the job's token may not publish to, refused where the job names it (`box.asset()`),
 * before any commit: refused by the server instead, the event would go dead while the job's checkpoint
 * moved past it, and a misspelt asset would lose the run's events. Only a token with a list of assets
 * (as the server said at open) is checked; the lifecycle assets go with any publish token.
 */
export function assertAssetInScope(asset: string, scope: TokenScopeAnswer | undefined): void {
  if (scope?.scope !== 'publish' || scope.assets === null || scope.assets.includes(asset) || isLifecycleAsset(asset)) return;
  const suggestion = asset.length <= MAX_ECHO ? closest(asset, scope.assets) : undefined;
  const listed = scope.assets.length === 0 ? 'none' : scope.assets.map((name) => `"${echo(name)}"`).join(', ');
  throw new EmissionValidationError(
    'asset',
    `asset: the job's token may not publish to "${echo(asset)}" (it may publish to ${listed})` +
      (suggestion === undefined ? '; if the name is right, give the job a token that lists it (oncebox token create --assets)' : `; did you mean "${suggestion}"?`),
  );
}
