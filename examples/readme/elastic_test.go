package readme

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The elastic snippet, served: with an empty queue a client gets 200
// requests an hour, the last 100 with X-Ratelimit-Remaining 0; with a
// queue half full, 100; when the queue drains, the room comes back.
func TestElasticSnippet(t *testing.T) {
	if time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)) < 10*time.Second {
		t.Skip("the hour's window ends in less than 10 seconds: its counts would restart mid-trace")
	}
	jobs := make(chan func(), 10)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	handler, err := elasticAPI(jobs, ok)
	require.NoError(t, err)
	get := func(ip string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = ip + ":1234"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		return w
	}
	for i := 1; i <= 201; i++ {
		w := get("192.0.2.1")
		require.Equal(t, map[bool]int{true: 200, false: 429}[i <= 200], w.Code, "request %d with room", i)
		assert.Equal(t, "100", w.Header().Get("X-Ratelimit-Limit"), "the limit itself, request %d", i)
		assert.Equal(t, strconv.Itoa(max(100-i, 0)), w.Header().Get("X-Ratelimit-Remaining"), "request %d", i)
	}
	for range 5 {
		jobs <- func() {}
	}
	for i := 1; i <= 101; i++ {
		w := get("192.0.2.2")
		require.Equal(t, map[bool]int{true: 200, false: 429}[i <= 100], w.Code, "request %d without room", i)
	}
	<-jobs
	w := get("192.0.2.2")
	require.Equal(t, 200, w.Code, "room again")
	assert.Equal(t, "0", w.Header().Get("X-Ratelimit-Remaining"))
}
