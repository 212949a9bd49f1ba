package sysctl

// PingGroupRange is the one sysctl whose value names group IDs: inside a
// pod's user namespace only the mapped GIDs exist, and a writer in the
// host's user namespace must give host GIDs.
const PingGroupRange = "net.ipv4.ping_group_range"
