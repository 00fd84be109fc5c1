module github.com/ratekit/ratekit

go 1.24.0

require (
	github.com/dunglas/httpsfv v1.1.2
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
