# Sourced by umbrelOS before any app's compose is rendered: the addresses
# of this app's containers on umbrel_main_network (10.21.0.0/16), unused by
# umbrel-apps' other apps when this was written, and the Electrum port.
export APP_OSPREY_IP="10.21.22.77"
export APP_OSPREY_NODE_IP="10.21.21.77"
export APP_OSPREY_NODE_PORT="50001"

# `implements: electrs`: an app that uses electrs reads APP_ELECTRS_*.
# With Osprey installed in electrs' place they name Osprey (an installed
# electrs, which exports its own first, keeps them).
for suffix in IP NODE_IP NODE_PORT; do
	electrs_var="APP_ELECTRS_${suffix}"
	osprey_var="APP_OSPREY_${suffix}"
	export "${electrs_var}=${!electrs_var:-${!osprey_var}}"
done

rpc_hidden_service_file="${EXPORTS_TOR_DATA_DIR}/app-${EXPORTS_APP_ID}-rpc/hostname"
export APP_OSPREY_RPC_HIDDEN_SERVICE="$(cat "${rpc_hidden_service_file}" 2>/dev/null || echo "notyetset.onion")"
