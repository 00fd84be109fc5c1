package replay_test

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/replay"
)

// hostile are keys (users) and a file name that would inject markup if
// written unescaped.
var hostile = []string{`<script>alert(1)</script>`, `"><img src=x onerror=alert(2)>`, `'><svg onload=alert(3)>`}

func TestHTMLSelfContained(t *testing.T) {
	log := handLog
	for _, k := range hostile {
		for s := range 5 {
			log += "10.0.0.9 - " + k + " [01/May/2024:12:00:0" + string(rune('0'+s)) + " +0000] \"GET / HTTP/1.1\" 200 1\n"
		}
	}
	o := optionsAll()
	o.Key, o.ShowKeys = "user", true
	rep, err := replay.Run(context.Background(), o, input(hostile[1]+".log", log))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Limits[0].TopLimited) != len(hostile) {
		t.Fatalf("the hostile keys are not listed: %+v", rep.Limits[0].TopLimited)
	}
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, bad := range append([]string{"<script", "<img", "<svg onload", "http://", "https://", "<link", "@import", "url("}, hostile...) {
		if strings.Contains(html, bad) {
			t.Errorf("the page holds %q", bad)
		}
	}
	for _, want := range []string{"<svg", "<polyline", "limit 3", "sliding-window-counter", "&lt;script&gt;alert(1)&lt;/script&gt;", "&#34;&gt;&lt;img src=x"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// The page renders in a real browser, when there is one: the screenshot
// is made and is not blank.
func TestHTMLInChromium(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("no", chromium)
	}
	if testing.Short() {
		t.Skip("short")
	}
	rep := run(t, optionsAll(), handLog)
	dir := t.TempDir()
	page, shot := filepath.Join(dir, "report.html"), filepath.Join(dir, "shot.png")
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "--window-size=1280,2000", "file://"+page)
	done := make(chan error, 1)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("chromium timed out")
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err, out.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// Not blank: many pixels differ from the first.
	bounds := img.Bounds()
	r0, g0, b0, _ := img.At(0, 0).RGBA()
	differ := 0
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 4 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 4 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r != r0 || g != g0 || b != b0 {
				differ++
			}
		}
	}
	if differ < 1000 {
		t.Fatalf("the screenshot is blank: %d sampled pixels differ", differ)
	}
}
