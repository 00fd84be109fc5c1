package rls_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSON(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(e.svc.JSON())
	defer srv.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL+"/json", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	body := `{"domain":"another","hits_addend":5,"descriptors":[{"entries":[{"key":"small","value":"j"}]}]}`
	code, out := post(body)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, out, `"overallCode":"OK"`)
	code, out = post(body)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, out, `"overallCode":"OVER_LIMIT"`)

	code, out = post(`{"domain": "<script>"`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.NotContains(t, out, "script", "no client text in the answer")
	code, _ = post(`{"domain":"","descriptors":[]}`)
	assert.Equal(t, http.StatusBadRequest, code)
	code, _ = post(`{"domain":"x","descriptors":[{"entries":[]}],"hits_addend":"nope"}`)
	assert.Equal(t, http.StatusBadRequest, code)

	resp, err := http.Get(srv.URL + "/json")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}
