module github.com/ratekit/ratekit/connect

go 1.25.0

require (
	connectrpc.com/connect v1.21.0
	github.com/ratekit/ratekit v0.1.0
	github.com/stretchr/testify v1.12.1
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800
	google.golang.org/protobuf v1.36.11
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

