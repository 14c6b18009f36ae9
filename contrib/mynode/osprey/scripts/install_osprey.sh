#!/bin/bash
# myNode's app installer runs this in /opt/mynode/osprey, where it has
# unpacked the release tarball of download_binary_url (checked there
# against the release's SHA256SUMS).
source /usr/share/mynode/mynode_device_info.sh
source /usr/share/mynode/mynode_app_versions.sh

set -x
set -e

echo "==================== INSTALLING APP ===================="
# The tarball's directory holds osprey and osprey-tools (osprey demo).
dir=$(find . -maxdepth 2 -name osprey -type f -printf '%h\n' | head -1)
install -m 0755 "$dir/osprey" "$dir/osprey-tools" /opt/mynode/osprey/
mkdir -p /mnt/hdd/mynode/osprey
chown -R bitcoin:bitcoin /mnt/hdd/mynode/osprey
/opt/mynode/osprey/osprey --version
echo "================== DONE INSTALLING APP ================="
