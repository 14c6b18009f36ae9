import { sdk } from './sdk'
import { port } from './utils'

export const setInterfaces = sdk.setupInterfaces(async ({ effects }) => {
  const host = sdk.MultiHost.of(effects, 'electrum')
  const origin = await host.bindPort(port, {
    protocol: null,
    preferredExternalPort: port,
    addSsl: { preferredExternalPort: 50002, alpn: null, addXForwardedHeaders: false },
    secure: null,
  })
  const electrum = sdk.createInterface(effects, {
    name: 'Electrum',
    id: 'electrum',
    description: 'Point your wallet here (TCP 50001, SSL 50002)',
    type: 'api',
    masked: false,
    schemeOverride: null,
    username: null,
    path: '',
    query: {},
  })
  return [await origin.export([electrum])]
})
