package redistest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartAnswersPing(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	if want := "127.0.0.1:" + strconv.Itoa(srv.Port()); srv.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", srv.Addr(), want)
	}
	if srv.Port() == 6379 {
		t.Fatal("started on the shared Redis port 6379")
	}
	rdb := srv.Client(t)
	ctx := context.Background()
	if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := infoField(info, "process_id"), strconv.Itoa(srv.PID()); got != want {
		t.Fatalf("server process_id = %s, PID() = %s", got, want)
	}
	for param, want := range map[string]string{"save": "", "appendonly": "no", "protected-mode": "no", "bind": "127.0.0.1"} {
		got, err := rdb.ConfigGet(ctx, param).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[param] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got[param], want)
		}
	}
}

func TestSetGet(t *testing.T) {
	t.Parallel()
	rdb := Start(t).Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v", got, err)
	}
}

func TestExtraArgs(t *testing.T) {
	t.Parallel()
	rdb := Start(t, "--maxmemory", "1mb").Client(t)
	got, err := rdb.ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["maxmemory"] != "1048576" {
		t.Fatalf("maxmemory = %q, want 1048576", got["maxmemory"])
	}
}

func TestStopAndRestart(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	port, oldPID := srv.Port(), srv.PID()

	srv.Stop(t)
	srv.Stop(t) // idempotent
	if srv.PID() != 0 {
		t.Fatalf("PID() after Stop = %d, want 0", srv.PID())
	}
	if conn, err := net.DialTimeout("tcp", srv.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("a stopped server still accepts connections")
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING to a stopped server succeeded")
	}

	srv.Restart(t)
	if srv.Port() != port {
		t.Fatalf("port changed from %d to %d", port, srv.Port())
	}
	if srv.PID() == oldPID || srv.PID() == 0 {
		t.Fatalf("PID after Restart = %d, before = %d", srv.PID(), oldPID)
	}
	// The old client reconnects; its first command may still meet a
	// broken pooled connection.
	var n int64
	for i := 0; i < 20; i++ {
		if n, err = rdb.DBSize(ctx).Result(); err == nil {
			break
		}
	}
	if err != nil || n != 0 {
		t.Fatalf("DBSIZE after Restart = %d, %v; want 0", n, err)
	}
	if _, err := rdb.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: %v, want redis.Nil", err)
	}
	exists, err := rdb.ScriptExists(ctx, sha).Result()
	if err != nil || len(exists) != 1 || exists[0] {
		t.Fatalf("SCRIPT EXISTS after Restart = %v, %v; want [false]", exists, err)
	}

	srv.Restart(t) // restarting a running server works too
	if err := srv.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ping := func(timeout time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		err := rdb.Ping(ctx).Err()
		return time.Since(start), err
	}
	if _, err := ping(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	srv.Pause(t)
	srv.Pause(t) // idempotent
	took, err := ping(200 * time.Millisecond)
	if err == nil {
		t.Fatal("PING to a paused server succeeded")
	}
	if took > 2*time.Second {
		t.Fatalf("PING to a paused server took %v, want about 200ms", took)
	}
	// A paused server still accepts connections (the kernel does).
	conn, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dialing a paused server: %v", err)
	}
	conn.Close()

	srv.Resume(t)
	for i := 0; ; i++ { // the connection that timed out may be discarded first
		if _, err = ping(5 * time.Second); err == nil {
			break
		}
		if i == 5 {
			t.Fatalf("PING after Resume: %v", err)
		}
	}
}

func TestPausedServerIsStoppedAtCleanup(t *testing.T) {
	t.Parallel()
	var srv *Server
	t.Run("inner", func(t *testing.T) {
		srv = Start(t)
		srv.Pause(t)
	})
	if srv.PID() != 0 {
		t.Fatalf("PID() after cleanup = %d, want 0", srv.PID())
	}
	if conn, err := net.DialTimeout("tcp", srv.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("the server outlived its test")
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Fatalf("FreePort() = %d", p)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("cluster of 3 ready in %v", time.Since(start))
	checkCluster(t, c)
}

// TestClusterFixedBusPort runs the setup used for Redis before 7.0 (bus
// port = port+10000, two-argument CLUSTER MEET).
func TestClusterFixedBusPort(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := startCluster(t, lookRedisServer(t), 3, true)
	t.Logf("cluster of 3 ready in %v", time.Since(start))
	for _, node := range c.Nodes {
		if node.busPort != node.Port()+10000 {
			t.Fatalf("bus port %d for port %d", node.busPort, node.Port())
		}
	}
	checkCluster(t, c)
}

func TestClusterOfFive(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 5)
	t.Logf("cluster of 5 ready in %v", time.Since(start))
	rdb := c.Client(t)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		key := "key-" + strconv.Itoa(i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	var total int64
	for _, node := range c.Nodes {
		n, err := node.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("node %s holds no key", node.Addr())
		}
		total += n
	}
	if total != 50 {
		t.Fatalf("%d keys in the cluster, want 50", total)
	}
}

// checkCluster checks a cluster of 3 nodes: every node says ok, and keys on
// each node's slots are written and read through a cluster client.
func checkCluster(t *testing.T, c *Cluster) {
	t.Helper()
	if len(c.Nodes) != 3 || len(c.Addrs()) != 3 {
		t.Fatalf("%d nodes, %d addrs; want 3", len(c.Nodes), len(c.Addrs()))
	}
	ctx := context.Background()
	for _, node := range c.Nodes {
		info, err := node.Client(t).ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := infoField(info, "cluster_state"); got != "ok" {
			t.Fatalf("%s: cluster_state = %q", node.Addr(), got)
		}
	}

	rdb := c.Client(t)
	// One key on each node's slot range.
	keys := make([]string, len(c.Nodes))
	for i, found := 0, 0; found < len(keys); i++ {
		key := "key-" + strconv.Itoa(i)
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if node := int(slot) * len(c.Nodes) / clusterSlots; keys[node] == "" && ownsSlot(node, len(c.Nodes), int(slot)) {
			keys[node] = key
			found++
		}
	}
	for _, key := range keys {
		if err := rdb.Set(ctx, key, "v-"+key, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	for i, key := range keys {
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v-"+key {
			t.Fatalf("GET %s = %q, %v", key, got, err)
		}
		// The key really lives on the node that owns its slot.
		if n, err := c.Nodes[i].Client(t).Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s on node %d = %d, %v", key, i, n, err)
		}
	}
}

// ownsSlot reports whether node i of n serves slot, given StartCluster's
// split of the slots.
func ownsSlot(i, n, slot int) bool {
	return i*clusterSlots/n <= slot && slot <= (i+1)*clusterSlots/n-1
}

func TestStartReportsPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s := &Server{bin: lookRedisServer(t), dir: t.TempDir()}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.launch(port, []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--dir", s.dir})
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("launch on a taken port: %v, want errPortInUse", err)
	}
	t.Logf("error: %v", err)
}

func TestRestartWaitsForThePort(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	srv.Stop(t)
	// Another process holds the port for a moment.
	l, err := net.Listen("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(300 * time.Millisecond)
		l.Close()
	}()
	srv.Restart(t)
	<-released
	if err := srv.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}
