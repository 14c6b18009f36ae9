import { sdk } from './sdk'
import { bitcoindMount, command, env, port } from './utils'

export const main = sdk.setupMain(async ({ effects }) => {
  console.info('Starting Osprey')

  const subcontainer = await sdk.SubContainer.of(
    effects,
    { imageId: 'osprey' },
    sdk.Mounts.of()
      .mountVolume({ volumeId: 'main', subpath: null, mountpoint: '/data', readonly: false })
      .mountDependency({
        dependencyId: 'bitcoind',
        volumeId: 'main',
        subpath: null,
        mountpoint: bitcoindMount,
        readonly: true,
      }),
    'osprey',
  )

  return sdk.Daemons.of(effects).addDaemon('primary', {
    subcontainer,
    exec: { command, env },
    // Ready once the Electrum port answers server.ping: it opens at
    // startup and answers during the first sync, so the service shows as
    // running while it indexes (wallets get the sync's progress).
    ready: {
      display: 'Electrum server',
      fn: () =>
        sdk.healthCheck.runHealthScript(['osprey', 'ping', `127.0.0.1:${port}`, '--timeout', '10'], subcontainer, {
          timeout: 15_000,
          errorMessage: 'The Electrum port does not answer',
          message: () => 'The Electrum port answers',
        }),
    },
    requires: [],
  })
})
