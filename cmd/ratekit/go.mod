module github.com/ratekit/ratekit/cmd/ratekit

go 1.25.0

require (
	github.com/ratekit/ratekit v0.1.0
	github.com/ratekit/ratekit/rulesfile v0.1.0
)

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.13.0 // indirect
)
