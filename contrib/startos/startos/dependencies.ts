import { sdk } from './sdk'

// Osprey needs the node running and unpruned (it indexes from genesis;
// it refuses a pruned node at startup with one line).
export const setDependencies = sdk.setupDependencies(async () => ({
  bitcoind: { kind: 'running', versionRange: '>=25', healthChecks: [] },
}))
