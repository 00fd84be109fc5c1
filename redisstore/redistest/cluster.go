package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// clusterTimeout bounds the wait for a new cluster to agree on its state.
const clusterTimeout = 30 * time.Second

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of master nodes without replicas, started
// for a test by StartCluster.
type Cluster struct {
	// Nodes are the cluster's servers, one per master, in the order of
	// the slot ranges they serve: Nodes[0] has the lowest slots. Each can
	// be stopped, restarted or paused like any Server.
	Nodes []*Server
}

// StartCluster starts a Redis Cluster of n masters (n must be at least 3)
// and returns once it is ready. Each node is a server as started by Start,
// in its own directory and on its own free port, with cluster mode enabled
// and nodes.conf as its cluster configuration file. The nodes are joined
// with CLUSTER MEET and the 16384 slots are split into n contiguous ranges
// of almost equal size, one per node, with CLUSTER ADDSLOTSRANGE, or
// CLUSTER ADDSLOTS on a Redis older than 7.0. StartCluster then polls, for
// at most 30 seconds, until every node reports cluster_state:ok with all
// slots assigned, and lists all n nodes, connected. The nodes are killed
// by t.Cleanup.
//
// On Redis 7.0 and later each node's cluster bus gets a free port of its
// own (--cluster-port); on older versions the bus is on the fixed offset
// port+10000, so the node's port is chosen such that that port is free too.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	bin := lookRedisServer(t)
	return startCluster(t, bin, n, redisMajorVersion(bin) < 7)
}

// startCluster is StartCluster; fixedBus chooses the pre-7.0 way to pick
// the cluster bus port (it also works on 7.0 and later).
func startCluster(t testing.TB, bin string, n int, fixedBus bool) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", n)
	}
	clusterArgs := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}
	pick := func() (int, int, []string) {
		if fixedBus {
			port := freePortWithBus(t)
			return port, port + 10000, clusterArgs
		}
		port, bus := FreePort(t), FreePort(t)
		for bus == port {
			bus = FreePort(t)
		}
		return port, bus, append(clusterArgs[:len(clusterArgs):len(clusterArgs)], "--cluster-port", strconv.Itoa(bus))
	}
	c := &Cluster{Nodes: make([]*Server, n)}
	for i := range c.Nodes {
		c.Nodes[i] = start(t, bin, pick)
	}

	admins := make([]*redis.Client, n)
	for i, node := range c.Nodes {
		admins[i] = adminClient(node.Addr())
		defer admins[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()

	for i, rdb := range admins {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if err := addSlots(ctx, rdb, lo, hi); err != nil {
			t.Fatalf("redistest: assigning slots %d-%d to %s: %v", lo, hi, c.Nodes[i].Addr(), err)
		}
	}
	for _, node := range c.Nodes[1:] {
		meet := []any{"CLUSTER", "MEET", "127.0.0.1", node.port}
		if node.busPort != node.port+10000 {
			// The optional bus port argument is new in Redis 7.0.
			meet = append(meet, node.busPort)
		}
		if err := admins[0].Do(ctx, meet...).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s from %s: %v", node.Addr(), c.Nodes[0].Addr(), err)
		}
	}

	for {
		why := ""
		for i, rdb := range admins {
			if why = nodeNotReady(ctx, rdb, n); why != "" {
				why = c.Nodes[i].Addr() + ": " + why
				break
			}
		}
		if why == "" {
			return c
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: cluster of %d nodes not ready within %v: %s", n, clusterTimeout, why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePortWithBus returns a free port p such that p+10000, the default
// cluster bus port, is a valid port and free too.
func freePortWithBus(t testing.TB) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		port := FreePort(t)
		if port+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		return port
	}
	t.Fatal("redistest: found no free port p <= 55535 with p+10000 free")
	return 0
}

// redisMajorVersion returns the major version of the redis-server at bin,
// from its --version output ("Redis server v=7.0.15 ..."), or 0 if it
// cannot tell.
func redisMajorVersion(bin string) int {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return 0
	}
	_, v, ok := strings.Cut(string(out), "v=")
	if !ok {
		return 0
	}
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// adminClient returns a client for setting up a node: RESP2, no
// handshake extras, short timeouts, no retries.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              time.Second,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		MaxRetries:               -1,
		PoolSize:                 1,
	})
}

// addSlots assigns the slots lo to hi (inclusive) to the node. go-redis's
// ClusterAddSlotsRange sends CLUSTER ADDSLOTS with every slot listed, so
// ADDSLOTSRANGE is sent as a raw command.
func addSlots(ctx context.Context, rdb *redis.Client, lo, hi int) error {
	err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
		return err
	}
	slots := make([]int, 0, hi-lo+1)
	for s := lo; s <= hi; s++ {
		slots = append(slots, s)
	}
	return rdb.ClusterAddSlots(ctx, slots...).Err()
}

// nodeNotReady returns why the node does not yet see a healthy cluster of
// n nodes, or "" if it does.
func nodeNotReady(ctx context.Context, rdb *redis.Client, n int) string {
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return "CLUSTER INFO: " + err.Error()
	}
	for field, want := range map[string]string{
		"cluster_state":          "ok",
		"cluster_known_nodes":    strconv.Itoa(n),
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
	} {
		if got := infoField(info, field); got != want {
			return fmt.Sprintf("%s is %q, want %q", field, got, want)
		}
	}
	nodes, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return "CLUSTER NODES: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(nodes), "\n")
	if len(lines) != n {
		return fmt.Sprintf("CLUSTER NODES lists %d nodes, want %d", len(lines), n)
	}
	for _, line := range lines {
		// <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
		f := strings.Fields(line)
		if len(f) < 8 {
			return "malformed CLUSTER NODES line: " + line
		}
		if strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") || strings.Contains(f[2], "fail") {
			return "node " + f[1] + " has flags " + f[2]
		}
		if f[7] != "connected" {
			return "node " + f[1] + " link is " + f[7]
		}
	}
	return ""
}

// Addrs returns the addresses of the nodes, "127.0.0.1:PORT", in the order
// of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, node := range c.Nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client seeded with every
// node's address, with default options and connection pools of its own,
// closed by t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
