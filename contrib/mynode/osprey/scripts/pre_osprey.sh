#!/bin/bash
# Runs before each start (the service's ExecStartPre): the config file,
# from the app's template when the user has none, on the network the
# node runs.

set -e

CONFIG=/mnt/hdd/mynode/osprey/osprey.toml
mkdir -p /mnt/hdd/mynode/osprey
if [ ! -f "$CONFIG" ]; then
    cp /usr/share/mynode_apps/osprey/osprey.toml "$CONFIG"
fi
# The network follows myNode's testnet setting, as for its electrs.
if [ -f /mnt/hdd/mynode/settings/.testnet_enabled ]; then
    sed -i 's/^network = "bitcoin"$/network = "testnet"/' "$CONFIG"
else
    sed -i 's/^network = "testnet"$/network = "bitcoin"/' "$CONFIG"
fi
chown -R bitcoin:bitcoin /mnt/hdd/mynode/osprey
