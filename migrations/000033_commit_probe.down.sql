DROP TABLE commit_probe;
