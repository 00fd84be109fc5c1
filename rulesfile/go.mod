module github.com/ratekit/ratekit/rulesfile

go 1.24.0

require (
	github.com/fsnotify/fsnotify v1.10.1
	github.com/ratekit/ratekit v0.1.0
	go.yaml.in/yaml/v3 v3.0.5
)

require golang.org/x/sys v0.13.0 // indirect
