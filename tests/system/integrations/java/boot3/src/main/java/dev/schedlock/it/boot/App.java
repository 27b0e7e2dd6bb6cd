package dev.schedlock.it.boot;

import dev.schedlock.shedlock.SchedlockLockProvider;
import net.javacrumbs.shedlock.core.LockProvider;
import net.javacrumbs.shedlock.provider.jdbctemplate.JdbcTemplateLockProvider;
import net.javacrumbs.shedlock.spring.annotation.EnableSchedulerLock;
import org.postgresql.ds.PGSimpleDataSource;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.jdbc.DataSourceAutoConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.scheduling.annotation.EnableScheduling;

/**
 * A Spring Boot 3 application with ShedLock 6, as a team runs it: @Scheduled + @SchedulerLock jobs (Jobs.java) and
 * one LockProvider bean. {@code --demo.provider=schedlock} takes the locks from schedlock (SCHEDLOCK_URL,
 * SCHEDLOCK_TOKEN); {@code --demo.provider=jdbc} is the JdbcTemplateLockProvider it replaces, on the same table
 * ({@code --demo.jdbc-url}, {@code --demo.table}). The suite starts several at once (tests/system/integrations/).
 */
@SpringBootApplication(exclude = DataSourceAutoConfiguration.class) // the schedlock JVMs have no database
@EnableScheduling
@EnableSchedulerLock(defaultLockAtMostFor = "PT10S")
public class App {
    public static void main(String[] args) {
        SpringApplication.run(App.class, args);
    }

    @Bean
    @ConditionalOnProperty(name = "demo.provider", havingValue = "schedlock")
    public LockProvider lockProvider() {
        return SchedlockLockProvider.builder().build(); // SCHEDLOCK_URL, SCHEDLOCK_TOKEN
    }

    @Bean
    @ConditionalOnProperty(name = "demo.provider", havingValue = "jdbc")
    public LockProvider jdbcLockProvider(@Value("${demo.jdbc-url}") String url, @Value("${demo.table}") String table) {
        PGSimpleDataSource dataSource = new PGSimpleDataSource();
        dataSource.setURL(url);
        return new JdbcTemplateLockProvider(JdbcTemplateLockProvider.Configuration.builder()
                .withJdbcTemplate(new JdbcTemplate(dataSource))
                .withTableName(table)
                .usingDbTime()
                .build());
    }
}
