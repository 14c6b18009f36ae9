// The Electrum port inside the container; StartOS publishes it (plain) and
// adds SSL on 50002 (interfaces.ts).
export const port = 50001

// Where Bitcoin Core's `main` volume (its data directory) is mounted,
// read-only: Osprey finds the cookie and the block files there, under the
// network's subdirectory as Core lays them out.
export const bitcoindMount = '/mnt/bitcoind'

// The daemon's command and environment: what tests/data/dropin/app-startos
// reproduces (its test checks these lines).
export const command = ['osprey', 'serve']
export const env = {
  OSPREY_NETWORK: 'bitcoin',
  OSPREY_DAEMON_RPC_ADDR: 'bitcoind.startos:8332',
  OSPREY_DAEMON_DIR: '/mnt/bitcoind',
  OSPREY_DB_DIR: '/data/db',
  OSPREY_ELECTRUM_RPC_ADDR: '0.0.0.0:50001',
}
