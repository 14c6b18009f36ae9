//! Layering: the settings of flags and environment over those of the config
//! files, one field at a time, before any default is filled in.

use super::ConfigArgs;

/// A setting of one layer over the same setting of the layer below.
trait Layer {
    fn over(self, below: Self) -> Self;
}

/// A value given wins; unset, the layer below decides.
impl<T> Layer for Option<T> {
    fn over(self, below: Self) -> Self {
        self.or(below)
    }
}

/// A switch is on when either layer turns it on: neither can turn it off.
impl Layer for bool {
    fn over(self, below: Self) -> Self {
        self || below
    }
}

/// A count (`-vv`) given wins, as an `Option` would.
impl Layer for u8 {
    fn over(self, below: Self) -> Self {
        if self > 0 {
            self
        } else {
            below
        }
    }
}

/// `ConfigArgs { field: top.field.over(below.field), ... }`. The literal has
/// no `..rest`, so a setting added to `ConfigArgs` and not here does not
/// compile.
macro_rules! each_over {
    ($top:ident over $below:ident: $($field:ident),* $(,)?) => {
        ConfigArgs { $($field: $top.$field.over($below.$field)),* }
    };
}

impl ConfigArgs {
    /// These settings over `below`'s, each on its own.
    pub(super) fn layered_over(self, below: ConfigArgs) -> ConfigArgs {
        let top = self;
        each_over!(top over below:
            conf, network, db_dir, daemon_dir, daemon_rpc_addr, cookie_file, auth,
            blocks_dir, block_source, electrum_rpc_addr, log_filter, reindex,
            history_entries_max, line_bytes_max, reply_bytes_max, batch_requests_max,
            subscriptions_per_session_max, sp_labels_max, sp_scan_priority,
            sp_subscriptions_per_session_max,
            sessions_max, reorg_depth_max, poll_interval_ms, disk_full_retry_max_secs,
            banner, client_memory_bytes_max, public_hosts, peers, sessions_per_ip_max,
            trusted_subnets, proxy_protocol_from, ipv6_prefix_bits, worker_threads, db_cache_mb, lsm_scale, reindex_on_format_change, silent_payments,
            electrum_tls_addr, tls_cert_file, tls_key_file, electrum_ws_addr,
            electrum_wss_addr, monitoring_addr, conf_dir,
            skip_default_conf_files,
            // electrs' names.
            server_banner, log_filters, index_lookup_limit, wait_duration_secs, sync_once,
            verbose, timestamp, auto_reindex, no_auto_reindex, db_log_dir, db_parallelism,
            jsonrpc_timeout_secs, ignore_mempool, disable_electrum_rpc,
            skip_block_download_wait, version, reindex_last_blocks, daemon_p2p_addr,
            index_batch_size, signet_magic, magic, cookie, jsonrpc_import,
            bulk_index_threads, tx_cache_size_mb, blocktxids_cache_size_mb, txid_limit,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_layer_wins_where_it_gives_a_value() {
        let top = ConfigArgs {
            banner: Some("flag".into()),
            verbose: 2,
            ..ConfigArgs::default()
        };
        let below = ConfigArgs {
            banner: Some("file".into()),
            sessions_max: Some(7),
            sync_once: true,
            verbose: 1,
            ..ConfigArgs::default()
        };
        let layered = top.layered_over(below);
        assert_eq!(layered.banner.as_deref(), Some("flag"));
        assert_eq!(layered.sessions_max, Some(7), "unset above: the file's");
        assert!(layered.sync_once, "a switch the file turns on stays on");
        assert_eq!(layered.verbose, 2);
        let layered = ConfigArgs::default().layered_over(ConfigArgs {
            verbose: 1,
            ..ConfigArgs::default()
        });
        assert_eq!(layered.verbose, 1, "no -v above: the file's count");
    }
}
