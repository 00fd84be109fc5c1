package unixtime_test

import (
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/unixtime"
)

func TestMod(t *testing.T) {
	for _, tc := range []struct {
		t      time.Time
		period time.Duration
		want   time.Duration
	}{
		{time.Unix(90, 5), time.Minute, 30*time.Second + 5},
		{time.Unix(-30, 0), time.Minute, 30 * time.Second},
		{time.Unix(-1, 999_999_999), time.Second, 999_999_999},
		{time.Date(1900, 3, 1, 12, 0, 30, 0, time.UTC), time.Minute, 30 * time.Second},
		{time.Date(3000, 1, 1, 0, 0, 30, 7, time.UTC), time.Minute, 30*time.Second + 7},
		{time.Date(9999, 12, 31, 23, 59, 30, 0, time.UTC), time.Hour, 59*time.Minute + 30*time.Second},
		{time.Unix(7, 0), 7 * time.Second, 0},
		{time.Unix(-8, 0), 7 * time.Second, 6 * time.Second},
		{time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC), 366 * 24 * time.Hour, 0}, // checked below
	} {
		got := time.Duration(unixtime.Mod(tc.t, int64(tc.period)))
		want := tc.want
		if tc.period == 366*24*time.Hour {
			want = time.Duration(tc.t.UnixNano() % int64(tc.period))
		}
		if got != want {
			t.Errorf("Mod(%v, %v) = %v, want %v", tc.t, tc.period, got, want)
		}
	}
}
