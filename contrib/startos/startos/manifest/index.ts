import { setupManifest } from '@start9labs/start-sdk'

export const manifest = setupManifest({
  id: 'osprey',
  title: 'Osprey',
  license: 'mit',
  wrapperRepo: 'https://example.invalid/osprey',
  upstreamRepo: 'https://example.invalid/osprey',
  supportSite: 'https://example.invalid/osprey/issues',
  marketingSite: 'https://example.invalid/osprey',
  docsUrl: 'https://example.invalid/osprey#readme',
  donationUrl: null,
  description: {
    short: 'An Electrum server for your own Bitcoin node',
    long: 'Osprey answers Electrum wallets (Sparrow, Electrum, BlueWallet, ...) from an index of your own node, so your addresses never reach a third-party server. While the first index is built it answers with its progress.',
  },
  volumes: ['main'],
  images: {
    osprey: {
      source: { dockerBuild: { dockerfile: 'Dockerfile', workdir: '.' } },
      arch: ['x86_64', 'aarch64'],
    },
  },
  dependencies: {
    bitcoind: {
      description: 'The node whose chain Osprey indexes (an archival node: Osprey indexes from genesis).',
      optional: false,
      metadata: {
        title: 'Bitcoin Core',
        icon: 'https://bitcoin.org/img/icons/opengraph.png',
      },
    },
  },
})
