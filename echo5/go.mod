module github.com/ratekit/ratekit/echo5

go 1.25.0

require (
	github.com/labstack/echo/v5 v5.4.4
	github.com/ratekit/ratekit v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/time v0.15.0 // indirect
)
