package readme

import (
	"net/http"

	"github.com/ratekit/ratekit/client"
)

// retryingClient is an HTTP client that waits and retries when it is rate
// limited.
func retryingClient() (*http.Client, error) {
	// snippet: client
	rt, err := client.New(http.DefaultTransport, client.WithPacing(true))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: rt}
	// end snippet
	return hc, nil
}
