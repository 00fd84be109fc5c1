package ratekitgin

import (
	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/rules"
)

// RulesRequest is the rules.Request that Rules decides c by, for tests
// that ask the engine what applies (rules.Engine.Matches).
func RulesRequest(c *gin.Context) rules.Request { return request{c} }
