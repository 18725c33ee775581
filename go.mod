module github.com/corralhq/corral

go 1.26.0
