DROP TABLE child_key_generations;
