DROP TABLE keyfilter_snapshots;
