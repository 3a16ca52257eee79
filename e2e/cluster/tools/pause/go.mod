module warmpath.dev/e2e/tools/pause

go 1.26.0
