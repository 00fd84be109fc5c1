package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.count != 3 || len(o.streams) != 3 || o.streams[2] != 128 || len(o.keys) != 2 || o.keys[1] != 10000 || len(o.kinds()) != 2 {
		t.Fatalf("defaults = %+v", o)
	}
	o, err = parseFlags([]string{"-only", "reference", "-skip", "load,burst", "-streams", "4"})
	if err != nil {
		t.Fatal(err)
	}
	if k := o.kinds(); len(k) != 1 || k[0] != kindReference || !o.skip["load"] || !o.skip["burst"] || o.skip["cases"] || o.streams[0] != 4 {
		t.Fatalf("parsed %+v", o)
	}
	for _, bad := range [][]string{
		{"-only", "both"},
		{"-skip", "cases,nothing"},
		{"-streams", "0"},
		{"-count", "0"},
		{"-reference-stats", "statsd"},
		{"extra"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

func TestMedianSpread(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	if s := spread([]float64{90, 100, 110}); s != 20 {
		t.Errorf("spread = %v, want 20", s)
	}
	if s := spread([]float64{5}); s != 0 {
		t.Errorf("spread of one = %v", s)
	}
}

func TestCount(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	call := func(sent, recv int, admitted bool) burstCall {
		return burstCall{sent: at(sent), recv: at(recv), admitted: admitted}
	}
	calls := []burstCall{
		call(600, 601, true),   // window 0
		call(900, 901, true),   // window 0
		call(950, 951, false),  // window 0, rejected
		call(999, 1003, true),  // straddles; middle 1001: window 1
		call(1000, 1001, true), // window 1
		call(1500, 1501, true), // window 1
		call(2100, 2101, true), // window 2
		{sent: at(2200), recv: at(2201), failed: true},
	}
	var r burstResult
	count(&r, calls)
	if r.calls != 8 || r.admitted != 6 || r.failed != 1 || r.ambiguous != 1 {
		t.Fatalf("calls %d admitted %d failed %d straddling %d, want 8 6 1 1", r.calls, r.admitted, r.failed, r.ambiguous)
	}
	want := []windowCount{
		{start: base, sent: 3, admitted: 2},
		{start: base.Add(time.Second), sent: 3, admitted: 3, straddling: 1},
		{start: base.Add(2 * time.Second), sent: 2, admitted: 1},
	}
	if len(r.windows) != len(want) {
		t.Fatalf("windows = %+v", r.windows)
	}
	for i, w := range want {
		if g := r.windows[i]; !g.start.Equal(w.start) || g.sent != w.sent || g.admitted != w.admitted || g.straddling != w.straddling {
			t.Errorf("window %d = %+v, want %+v", i, g, w)
		}
	}
	// Admitted at 600.5, 900.5, 1000.5, 1001, 1500.5, 2100.5 ms: the
	// second from 600.5 holds five.
	if r.maxSliding != 5 {
		t.Errorf("busiest second = %d, want 5", r.maxSliding)
	}
}

func TestWriteProtoset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.protoset")
	if err := writeProtoset(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	// Every file's imports come before it, so the set resolves on its own.
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatalf("the protoset does not resolve: %v", err)
	}
	name := protoreflect.FullName(strings.TrimSuffix(rlsMethod, ".ShouldRateLimit"))
	d, err := files.FindDescriptorByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if d.(protoreflect.ServiceDescriptor).Methods().ByName("ShouldRateLimit") == nil {
		t.Fatalf("%s has no ShouldRateLimit", name)
	}
}

func TestWriteLoadData(t *testing.T) {
	dir := t.TempDir()
	one, many := filepath.Join(dir, "one.json"), filepath.Join(dir, "many.json")
	if err := writeLoadData(one, loadConfig{values: 1, key: "hi"}, "t"); err != nil {
		t.Fatal(err)
	}
	if err := writeLoadData(many, loadConfig{values: 3, key: "lo"}, "t"); err != nil {
		t.Fatal(err)
	}
	var msg loadMessage
	if b, err := os.ReadFile(one); err != nil || json.Unmarshal(b, &msg) != nil {
		t.Fatalf("one: %v", err)
	}
	if msg.Domain != "bench" || msg.Descriptors[0].Entries[0] != (loadEntry{Key: "hi", Value: "t-0"}) {
		t.Errorf("one = %+v", msg)
	}
	var msgs []loadMessage
	if b, err := os.ReadFile(many); err != nil || json.Unmarshal(b, &msgs) != nil {
		t.Fatalf("many: %v", err)
	}
	if len(msgs) != 3 || msgs[2].Descriptors[0].Entries[0] != (loadEntry{Key: "lo", Value: "t-2"}) {
		t.Errorf("many = %+v", msgs)
	}
}
