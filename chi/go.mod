module github.com/ratekit/ratekit/chi

go 1.24.0

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/ratekit/ratekit v0.1.0
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
